#!/usr/bin/env python3
"""A model command for `gelstore serve --assistant` that replays recorded runs.

It speaks the assistant protocol (see src/server/assistant/run.rs): the
request arrives as one JSON object on stdin; the run goes to stdout as JSON
lines in the format of fixtures/streams/README.md.

- For the reply to an approval answer (`approved` is not empty) it first
  prints one `tool_result` line per approved call ("ran <name>"), then
  replays fixtures/streams/plain_text_small_deltas.
- Otherwise it replays the fixture the user's last message names as
  `STREAM:<case>` (default plain_text_small_deltas). `STREAM:exit-1` exits
  with status 1 after one delta, `STREAM:garbage` prints a line that is not
  JSON, `STREAM:hang` goes quiet after one delta (without closing its
  output), `STREAM:linger` replays a whole run and then stays alive.
"""

import json
import os
import sys
import time

STREAMS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "fixtures", "streams")


def replay(case):
    with open(os.path.join(STREAMS, case, "input.jsonl"), encoding="utf-8") as f:
        sys.stdout.write(f.read())


def main():
    request = json.load(sys.stdin)
    if request["approved"]:
        for call in request["approved"]:
            print(json.dumps({"type": "tool_result", "callId": call["callId"],
                              "outcome": "succeeded", "output": "ran " + call["name"],
                              "elapsedMs": 3}))
        replay("plain_text_small_deltas")
        return 0
    text = ""
    for part in (request["messages"][-1].get("content") or {}).get("parts", []):
        text += part.get("text", "")
    case = text.split("STREAM:", 1)[1].split()[0] if "STREAM:" in text else "plain_text_small_deltas"
    if case == "exit-1":
        print(json.dumps({"type": "text_start", "contentIndex": 0}))
        print(json.dumps({"type": "text_delta", "contentIndex": 0, "delta": "Partial"}))
        sys.stdout.flush()
        return 1
    if case == "garbage":
        print("this is not JSON")
        return 0
    if case == "hang":
        print(json.dumps({"type": "text_start", "contentIndex": 0}))
        print(json.dumps({"type": "text_delta", "contentIndex": 0, "delta": "Thinking"}))
        sys.stdout.flush()
        time.sleep(600)
        return 0
    if case == "linger":
        replay("plain_text_small_deltas")
        sys.stdout.flush()
        time.sleep(600)
        return 0
    replay(case)
    return 0


if __name__ == "__main__":
    sys.exit(main())
