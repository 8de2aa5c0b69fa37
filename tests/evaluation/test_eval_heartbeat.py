"""evaluate's console while nothing finishes: a line after `heartbeat_s` without one (make demo's
phases never stay quiet for 30 s, issue 37)."""

from __future__ import annotations

import asyncio
import io
import time

from evaluation.run import EvalConfig, _Progress


def test_a_line_when_no_episode_finished_for_a_while():
    out = io.StringIO()
    progress = _Progress(total=12, done=2, stream=out)
    progress.running = 4

    async def beat_for(seconds: float) -> None:
        task = asyncio.create_task(progress.heartbeat(0.3))
        await asyncio.sleep(seconds)
        task.cancel()

    asyncio.run(beat_for(0.8))
    lines = out.getvalue().splitlines()
    assert lines and all(line.startswith("[2/12] 4 episode(s) running, ") for line in lines), lines
    progress.last = time.monotonic()  # an episode just finished (update() records it): quiet for a while
    out.truncate(0)
    out.seek(0)
    asyncio.run(beat_for(0.15))
    assert out.getvalue() == ""
    assert EvalConfig(env_urls=["http://127.0.0.1:9"], out="x").heartbeat_s == 20.0
