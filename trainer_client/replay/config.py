"""Teacher pool configuration: a YAML file of OpenAI-compatible endpoints and their prices."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator


class ReplayConfigError(ValueError):
    """A teachers file or a teacher's environment is unusable."""


class TeacherConfig(BaseModel):
    """One teacher: an OpenAI-compatible chat-completions endpoint.

    The API key is never stored here: only the name of the environment variable holding it.
    """

    model_config = ConfigDict(extra="forbid")

    name: str
    model: str
    base_url: str
    """Up to and including the API version, e.g. https://openrouter.ai/api/v1."""
    api_key_env: str | None = None
    """Environment variable with the bearer token; None for keyless local servers."""
    price_in: float = Field(ge=0)
    """USD per input (prompt) token."""
    price_out: float = Field(ge=0)
    """USD per output (completion) token."""
    max_concurrency: int = Field(default=4, ge=1)
    timeout: float = Field(default=120.0, gt=0)
    """Seconds per attempt (connect, read, write, pool)."""
    max_tokens: int = Field(default=1024, ge=1)
    """Output cap sent with every request; the budget reserves this many output tokens."""
    temperature: float | None = None
    """Sent only when set (some reasoning models reject it)."""
    tool_choice: str | None = "required"
    extra_body: dict = Field(default_factory=dict)
    """Merged into the request body (provider routing, reasoning effort, ...)."""

    @field_validator("base_url")
    @classmethod
    def _strip_slash(cls, v: str) -> str:
        return v.rstrip("/")

    def api_key(self) -> str | None:
        """The key from the environment; raises if the named variable is unset."""
        if self.api_key_env is None:
            return None
        key = os.environ.get(self.api_key_env)
        if not key:
            raise ReplayConfigError(
                f"teacher {self.name!r}: environment variable {self.api_key_env} is not set"
            )
        return key


class RetryConfig(BaseModel):
    """Retries on 429, 5xx, timeouts and transport errors, with exponential backoff."""

    model_config = ConfigDict(extra="forbid")

    max_retries: int = Field(default=4, ge=0)
    backoff_base_s: float = Field(default=1.0, ge=0)
    backoff_max_s: float = Field(default=60.0, ge=0)
    max_retry_after_s: float = Field(default=120.0, ge=0)
    """A server's Retry-After is honoured up to this many seconds."""


class TeachersFile(BaseModel):
    """The YAML file given to `trainer-client replay --teachers`."""

    model_config = ConfigDict(extra="forbid")

    teachers: list[TeacherConfig] = Field(min_length=1)
    retry: RetryConfig = Field(default_factory=RetryConfig)

    @field_validator("teachers")
    @classmethod
    def _unique_names(cls, v: list[TeacherConfig]) -> list[TeacherConfig]:
        names = [t.name for t in v]
        if len(set(names)) != len(names):
            raise ValueError(f"teacher names must be unique: {names}")
        return v


def load_teachers(path: str | Path | None = None) -> TeachersFile:
    """Read a teachers YAML file; None reads the packaged defaults (the design's three)."""
    if path is None:
        text = resources.files(__package__).joinpath("teachers.default.yaml").read_text()
    else:
        text = Path(path).read_text()
    try:
        return TeachersFile.model_validate(yaml.safe_load(text))
    except Exception as exc:  # yaml or validation: one clear error for the CLI
        raise ReplayConfigError(f"bad teachers file {path or 'teachers.default.yaml'}: {exc}") from exc
