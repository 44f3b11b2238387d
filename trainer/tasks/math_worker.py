"""A math-verify worker process: reads JSON requests on stdin, writes one JSON reply per line.

Run as a script (`python -I math_worker.py`); the parent kills it when a request runs past its
timeout, since math-verify's own signal-based timeouts are disabled (they need the main thread).
"""

from __future__ import annotations

import json
import logging
import sys


def _parse(text: str) -> list:
    """math-verify's parse of one answer, wrapped in \\boxed{} so LaTeX and plain forms both parse."""
    from math_verify import parse

    return parse("\\boxed{" + text + "}", parsing_timeout=None)


def _verify(gold: list, pred: list) -> bool:
    """math-verify's equivalence, with its timeouts off."""
    from math_verify import verify

    return bool(verify(gold, pred, timeout_seconds=None))


def handle(request: dict) -> dict:
    """Answer one request: {"op": "verify", "gold", "pred"} or {"op": "agree", "a", "b"}."""
    op = request.get("op")
    if op == "verify":
        gold, pred = str(request["gold"]), str(request["pred"])
        parsed_pred = _parse(pred)
        if not parsed_pred:
            return {"parsed": False, "ok": False, "error": "answer unparseable by math-verify"}
        parsed_gold = _parse(gold)
        if not parsed_gold:
            ok = gold.strip() == pred.strip()
            return {"parsed": True, "ok": ok, "error": None if ok else "wrong answer (gold unparseable)"}
        ok = _verify(parsed_gold, parsed_pred)
        return {"parsed": True, "ok": ok, "error": None if ok else "wrong answer"}
    if op == "agree":
        a, b = str(request["a"]), str(request["b"])
        pa, pb = _parse(a), _parse(b)
        if not pa or not pb:
            return {"ok": a.strip() == b.strip() and bool(a.strip())}
        return {"ok": _verify(pa, pb) or _verify(pb, pa)}
    if op == "ping":
        return {"ok": True}
    raise ValueError(f"unknown op {op!r}")


def main() -> int:
    """Serve requests until stdin closes."""
    logging.disable(logging.CRITICAL)
    import math_verify  # noqa: F401  (import once, before the first request)

    for line in sys.stdin:
        try:
            reply = handle(json.loads(line))
        except Exception as e:  # noqa: BLE001 - a bad request must not kill the worker
            reply = {"parsed": False, "ok": False, "error": f"math-verify error: {type(e).__name__}: {e}"[:500]}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
