"""The one exception transports turn into error frames (``code`` + ``message``)."""

from __future__ import annotations

from typing import Any

from contract import ErrorCode, ErrorData


class ProtocolError(Exception):
    """A request the server refuses; the session survives unless the code says otherwise."""

    def __init__(self, code: ErrorCode, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.extra = extra

    def data(self) -> dict[str, Any]:
        return ErrorData(code=self.code, message=self.message, **self.extra).model_dump(mode="json")
