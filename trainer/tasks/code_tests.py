"""Code tests columns as the sandbox's test spec: DeepCoder, TACO/APPS and LiveCodeBench formats.

`code_tests` turns a code row's tests column(s) into one spec: {"kind": "stdio", "cases": ...}
for stdin/stdout tests, or {"kind": "assert", "code": ..., "entry_points": [fn]} for functional
tests, whose code (`functional_test_code`) calls the program's entry point per case.
"""

from __future__ import annotations

import base64
import io
import json
import pickle
import zlib
from typing import Any


class _NoGlobals(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing to unpickle {module}.{name}")


def _decode_tests(value: Any, where: str) -> Any:
    """A tests column as Python data: JSON text, LiveCodeBench's base64+zlib+pickle text, or data."""
    if not isinstance(value, (str, bytes)):
        return value
    text = value.decode() if isinstance(value, bytes) else value
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    try:  # LiveCodeBench private_test_cases: base64(zlib(pickle(json text))); no globals allowed
        inner = _NoGlobals(io.BytesIO(zlib.decompress(base64.b64decode(text)))).load()
        return json.loads(inner) if isinstance(inner, (str, bytes)) else inner
    except Exception as e:  # noqa: BLE001
        raise ValueError(f"{where}: tests are neither JSON nor LiveCodeBench-compressed: {e}") from e


def _fn_name_of(case: dict[str, Any], row: dict[str, Any]) -> str | None:
    meta = case.get("metadata")
    if isinstance(meta, str):
        try:
            meta = json.loads(meta)
        except json.JSONDecodeError:
            meta = None
    name = (meta or {}).get("func_name") if isinstance(meta, dict) else None
    name = name or case.get("fn_name")
    if not name:
        row_meta = row.get("metadata")
        if isinstance(row_meta, str):
            try:
                row_meta = json.loads(row_meta)
            except json.JSONDecodeError:
                row_meta = None
        if isinstance(row_meta, dict):
            name = row_meta.get("func_name")
    return name


def _as_text(x: Any) -> str:
    if isinstance(x, list):
        return "\n".join(str(v) for v in x)
    return "" if x is None else str(x)


def _args_of(x: Any) -> list:
    """Functional-test arguments: LiveCodeBench text (one JSON value per line) or a TACO list."""
    if isinstance(x, str):
        return [json.loads(line) for line in x.split("\n") if line.strip()]
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _expected_of(x: Any) -> Any:
    if isinstance(x, str):
        try:
            return json.loads(x)
        except json.JSONDecodeError:
            return x
    return x


def code_tests(values: list[Any], row: dict[str, Any], where: str) -> dict[str, Any]:
    """One normalised tests spec from the tests column(s) of a code row (DeepCoder, TACO, LCB)."""
    cases: list[dict[str, Any]] = []
    functional: list[tuple[list, Any]] = []
    fn_name: str | None = None
    for value in values:
        data = _decode_tests(value, where)
        if isinstance(data, dict) and data.get("kind") in ("assert", "stdio"):
            return data  # already normalised
        if isinstance(data, dict) and "inputs" in data and "outputs" in data:  # TACO / APPS
            name = data.get("fn_name")
            for inp, out in zip(data["inputs"], data["outputs"]):
                if name:
                    fn_name = name
                    functional.append((_args_of(inp), out))
                else:
                    cases.append({"input": _as_text(inp), "output": _as_text(out)})
            continue
        if not isinstance(data, list):
            raise ValueError(f"{where}: unknown tests format {type(data).__name__}: {str(data)[:100]!r}")
        for case in data:  # DeepCoder primeintellect/lcbv5/codeforces, LiveCodeBench
            if not isinstance(case, dict) or "input" not in case or "output" not in case:
                raise ValueError(f"{where}: a test case needs 'input' and 'output': {str(case)[:100]!r}")
            kind = case.get("testtype") or case.get("type") or "stdin"
            if kind in ("functional", "function_call"):
                name = _fn_name_of(case, row)
                if not name:
                    raise ValueError(f"{where}: functional test without a function name")
                fn_name = name
                try:
                    functional.append((_args_of(case["input"]), _expected_of(case["output"])))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{where}: functional test input is not JSON lines: {e}") from e
            else:
                cases.append({"input": _as_text(case["input"]), "output": _as_text(case["output"])})
    if functional and cases:
        raise ValueError(f"{where}: mixes stdin and functional tests")
    if functional:
        assert fn_name is not None
        if not fn_name.isidentifier():
            raise ValueError(f"{where}: function name {fn_name!r} is not an identifier")
        return {"kind": "assert", "code": functional_test_code(fn_name, functional), "entry_points": [fn_name]}
    if not cases:
        raise ValueError(f"{where}: no test cases")
    return {"kind": "stdio", "cases": cases, "fn_name": None}


def functional_test_code(fn_name: str, cases: list[tuple[list, Any]]) -> str:
    """Assert-style tests calling entry point `fn_name` per case (the sandbox resolves it to the
    program's function of that name, or else to the method of a fresh `Solution()`).

    The result must be plain data (numbers, strings, lists, dicts...) equal to the expected value,
    floats within 1e-6; like TACO, an expected singleton list also accepts its element.
    """
    data = json.dumps([[args, out] for args, out in cases])
    return f"""import json as _json, math as _math, copy as _copy
_CASES = _json.loads({data!r})
_PLAIN = (int, float, str, bool, type(None), list, tuple, dict)
def _same(a, b):
    if type(a) not in _PLAIN:
        return False
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and _math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6)
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and set(a) == set(b) and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b or (isinstance(a, (int, bool)) and isinstance(b, (int, bool)) and a == b)
for _i, (_args, _want) in enumerate(_CASES):
    _got = {fn_name}(*_copy.deepcopy(_args))
    assert _same(_got, _want) or (isinstance(_want, list) and len(_want) == 1 and _same(_got, _want[0])), "case %d" % _i
"""
