"""Scripted agents' model replies, for a fake engine to play."""

from __future__ import annotations

import json

from harbor_ray.capture.proxy.fake_engine import FakeReply


def terminus_script(keystrokes: str):
    """terminus-2's JSON protocol: act once, then claim completion twice (it confirms)."""

    def script(messages: list[dict]) -> FakeReply:
        acted = sum(1 for m in messages if m.get("role") == "assistant")
        if acted == 0:
            reply = {"analysis": "Empty directory.", "plan": "Write the file.",
                     "commands": [{"keystrokes": keystrokes, "duration": 0.5}],
                     "task_complete": False}
        else:
            reply = {"analysis": "Done.", "plan": "Finish.", "commands": [],
                     "task_complete": True}
        return FakeReply(text=json.dumps(reply))

    return script
