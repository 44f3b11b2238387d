"""Writes the small fixture files of this folder, one per online source, in its real row format."""

from __future__ import annotations

import base64
import json
import pickle
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

HERE = Path(__file__).parent
DAPO_INSTRUCTION = (
    "Solve the following math problem step by step. The last line of your response should be "
    "of the form Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
)


def write_jsonl(name: str, rows: list[dict]) -> None:
    with open(HERE / name, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def dapo() -> list[dict]:
    """open-r1/DAPO-Math-17k-Processed (config en): prompt, solution, plus the verl columns."""
    rows = []
    for i in range(40):
        a, b = 3 + i, 7 + 2 * i
        problem = f"What is the value of {a} \\times {b} + {i}?"
        answer = str(a * b + i)
        content = DAPO_INSTRUCTION + problem + '\n\nRemember to put your answer on its own line after "Answer:".'
        rows.append(
            {
                "prompt": problem,
                "solution": answer,
                "data_source": "math_dapo",
                "source_prompt": [{"content": content, "role": "user"}],
                "ability": "MATH",
                "reward_model": {"ground_truth": answer, "style": "rule-lighteval/MATH_v2"},
                "extra_info": {"index": f"9a9b6eb4-a1cb-49d1-8c1e-62eaf2f{i:05d}"},
            }
        )
    return rows


def aime() -> list[dict]:
    """MathArena/aime_2025: problem_idx, problem, answer (an integer)."""
    return [
        {
            "problem_idx": 1,
            "problem": "Find the sum of all integer bases $b>9$ for which $17_b$ is a divisor of $97_b$.",
            "answer": 70,
        },
        {"problem_idx": 2, "problem": "Compute $2^{10} - 1000$.", "answer": 24},
        {"problem_idx": 3, "problem": "How many positive divisors does $2025$ have?", "answer": 15},
    ]


def gsm8k() -> list[dict]:
    """openai/gsm8k (main): question, answer ending in '#### N'."""
    return [
        {
            "question": "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips "
            "in May. How many clips did Natalia sell altogether in April and May?",
            "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 "
            "clips altogether in April and May.\n#### 72",
        },
        {
            "question": "A shop sells 1,200 pens a week. How many in 2 weeks?",
            "answer": "1,200*2 = <<1200*2=2400>>2,400\n#### 2,400",
        },
    ]


def math500() -> list[dict]:
    """HuggingFaceH4/MATH-500: problem, solution, answer, subject, level, unique_id."""
    return [
        {
            "problem": "Simplify $\\frac{2}{4}$.",
            "solution": "We have $\\frac{2}{4} = \\boxed{\\frac{1}{2}}$.",
            "answer": "\\frac{1}{2}",
            "subject": "Prealgebra",
            "level": 1,
            "unique_id": "test/prealgebra/1.json",
        },
        {
            "problem": "Convert the point $(0,3)$ to polar coordinates.",
            "solution": "... $\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}$",
            "answer": "\\left( 3, \\frac{\\pi}{2} \\right)",
            "subject": "Precalculus",
            "level": 2,
            "unique_id": "test/precalculus/807.json",
        },
    ]


def deepcoder_primeintellect() -> list[dict]:
    """agentica-org/DeepCoder-Preview-Dataset, primeintellect: tests as JSON text."""
    stdin = [
        {"type": "stdin_stdout", "input": "1 2\n", "output": "3\n"},
        {"type": "stdin_stdout", "input": "5 7\n", "output": "12\n"},
    ]
    call = [
        {"type": "function_call", "fn_name": "double_all", "input": [[1, 2, 3]], "output": [[2, 4, 6]]},
        {"type": "function_call", "fn_name": "double_all", "input": [[]], "output": [[]]},
    ]
    return [
        {
            "problem": "Read two integers and print their sum.",
            "tests": json.dumps(stdin),
            "source": "primeintellect",
            "starter_code": "",
            "metadata": "{}",
        },
        {
            "problem": "Write double_all(xs) returning each element doubled.",
            "tests": json.dumps(call),
            "source": "primeintellect",
            "starter_code": "def double_all(xs):",
            "metadata": "{}",
        },
    ]


def deepcoder_lcbv5() -> list[dict]:
    """DeepCoder lcbv5: tests with testtype stdin|functional and metadata.func_name."""
    stdin = [
        {
            "input": "3\nabc\nacb\nbca\n",
            "output": "YES\nYES\nNO\n",
            "testtype": "stdin",
            "metadata": {"func_name": None},
        }
    ]
    functional = [
        {
            "input": "[2, 7, 11, 15]\n9",
            "output": "[0, 1]",
            "testtype": "functional",
            "metadata": {"func_name": "twoSum"},
        },
        {"input": "[3, 2, 4]\n6", "output": "[1, 2]", "testtype": "functional", "metadata": {"func_name": "twoSum"}},
    ]
    return [
        {
            "problem": "For each string, print YES if one swap can make it abc.",
            "tests": json.dumps(stdin),
            "source": "lcbv5",
            "starter_code": "",
            "metadata": "{}",
        },
        {
            "problem": "Return indices of the two numbers adding up to target.",
            "tests": json.dumps(functional),
            "source": "lcbv5",
            "metadata": json.dumps({"func_name": "twoSum"}),
            "starter_code": "class Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:\n        ",
        },
    ]


def deepcoder_taco() -> list[dict]:
    """DeepCoder taco: tests {"inputs", "outputs", "fn_name"?}."""
    call = {"inputs": [[3], [10]], "outputs": [[6], [55]], "fn_name": "tri"}
    stdin = {"inputs": ["2\n3 4\n5 6\n", "1\n10\n"], "outputs": ["3\n5\n", "10\n"]}
    return [
        {
            "problem": "Write tri(n) returning the n-th triangular number.",
            "tests": json.dumps(call),
            "source": "taco",
            "starter_code": "def tri(n):",
            "metadata": "{}",
        },
        {
            "problem": "Read n and then n lines; print the first number of each line.",
            "tests": json.dumps(stdin),
            "source": "taco",
            "starter_code": "",
            "metadata": "{}",
        },
    ]


def _lcb_compress(cases: list[dict]) -> str:
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(cases)))).decode()


def livecodebench() -> list[dict]:
    """livecodebench/code_generation_lite: public tests JSON, private tests base64(zlib(pickle(json)))."""
    public = [{"input": "2 3\n", "output": "6\n", "testtype": "stdin"}]
    private = [
        {"input": "4 5\n", "output": "20\n", "testtype": "stdin"},
        {"input": "0 9\n", "output": "0\n", "testtype": "stdin"},
    ]
    fpublic = [{"input": '"abc"', "output": '"cba"', "testtype": "functional"}]
    fprivate = [{"input": '""', "output": '""', "testtype": "functional"}]
    base = {"platform": "atcoder", "contest_id": "abc300", "contest_date": "2024-08-03T00:00:00", "difficulty": "easy"}
    return [
        {
            **base,
            "question_title": "Product",
            "question_id": "abc300_a",
            "question_content": "Read A and B and print A times B.",
            "starter_code": "",
            "public_test_cases": json.dumps(public),
            "private_test_cases": _lcb_compress(private),
            "metadata": "{}",
        },
        {
            **base,
            "platform": "leetcode",
            "question_title": "reverse-string",
            "question_id": "3000",
            "question_content": "Return the string s reversed.",
            "starter_code": "class Solution:\n    def reverseIt(self, s: str) -> str:\n        ",
            "public_test_cases": json.dumps(fpublic),
            "private_test_cases": _lcb_compress(fprivate),
            "metadata": json.dumps({"func_name": "reverseIt"}),
        },
    ]


def main() -> None:
    write_jsonl("dapo_math_17k_processed.jsonl", dapo())
    write_jsonl("aime_2025.jsonl", aime())
    pq.write_table(pa.Table.from_pylist(aime()), HERE / "aime_2025.parquet")
    write_jsonl("gsm8k.jsonl", gsm8k())
    write_jsonl("math500.jsonl", math500())
    write_jsonl("deepcoder_primeintellect.jsonl", deepcoder_primeintellect())
    write_jsonl("deepcoder_lcbv5.jsonl", deepcoder_lcbv5())
    write_jsonl("deepcoder_taco.jsonl", deepcoder_taco())
    write_jsonl("livecodebench.jsonl", livecodebench())


if __name__ == "__main__":
    main()
