#!/usr/bin/env python3
"""What a meson test run left in its testlog.json, for scripts/test.sh's closing lines.

  testlog.py count JSON LABEL   one line: LABEL OK FAILED SKIPPED NAME(RESULT)...
  testlog.py tails JSON [N]     the last N (default 15) lines of each failed test's output

CI shows only the end of the log, so the names and the last words of what failed go there."""
import json
import sys


# Lines that say what went wrong: Criterion's failures, the harness's own messages, sanitizers.
KEY = ("[FAIL]", "[----]", "FAILED", "ERROR: ", "WARNING: ThreadSanitizer", "runtime error",
       "Assertion", "timed out", "Timeout")


def tests(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def failed(t):
    return t["result"] not in ("OK", "EXPECTEDFAIL", "SKIP")


def count(path, label):
    ts = tests(path)
    ok = sum(t["result"] in ("OK", "EXPECTEDFAIL") for t in ts)
    skip = sum(t["result"] == "SKIP" for t in ts)
    bad = [f"{t['name']}({t['result']})" for t in ts if failed(t)]
    print(f"{label} {ok} {len(bad)} {skip} {' '.join(bad)}".rstrip())


def tails(path, n):
    for t in filter(failed, tests(path)):
        out = ((t.get("stdout") or "") + (t.get("stderr") or "")).rstrip().splitlines()
        key = [line for line in out if any(k in line for k in KEY)][:12]
        if key:
            print(f"--- {t['name']} ({t['result']}), what it said failed:")
            for line in key:
                print("    " + line[:200])
        print(f"--- {t['name']} ({t['result']}), last {min(n, len(out))} lines:")
        for line in out[-n:]:
            print("    " + line[:200])


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "count":
        count(sys.argv[2], sys.argv[3])
    elif len(sys.argv) >= 3 and sys.argv[1] == "tails":
        tails(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 15)
    else:
        sys.exit(__doc__)
