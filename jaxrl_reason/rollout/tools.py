"""Tools a policy may call mid-reasoning, and the environment that runs its calls.

A tool is a small object with a `name` and `__call__(args: str) -> ToolResult`, registered by name with
`register_tool`; `make_tool(name, **kw)` builds one. A tool never raises on what the model wrote: a crash, a
timeout or a huge output becomes a short, clear message (`ToolResult.ok` False), because a trainer must not die on
a sampled program.

Call syntax: the model writes `<NAME>ARGS</NAME>` (e.g. `<calculator>123*456</calculator>`); the closing tag is a
stop string, so generation pauses right after the call. `ToolEnv` turns one model turn into an observation (the
tool's output, which the rollout appends as an environment turn of the chat template) or ends the episode.
"""
from __future__ import annotations

import ast
import concurrent.futures
import dataclasses
import operator
import re
from typing import Any, Callable, NamedTuple, Optional, Sequence

TOOLS: dict[str, Callable[..., Any]] = {}


class ToolResult(NamedTuple):
    text: str  # what the model reads (already bounded by the tool's max_chars)
    ok: bool  # the call ran and produced a result (False: parse error, crash, timeout, output too long)


class Step(NamedTuple):
    """What the environment answers to one model turn."""

    observation: Optional[str]  # the environment turn's content; None when the episode is over
    done: bool
    reward: Optional[float] = None  # an environment's own reward at the end (None: the task's reward_fn decides)


def register_tool(name: str):
    """Class decorator: `@register_tool("calculator")` makes the tool buildable by name (`make_tool`)."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name or ""):
        raise ValueError(f"tool name must be lowercase letters, digits and '_' (it is written as a tag <{name}>)")

    def add(cls):
        if name in TOOLS and TOOLS[name] is not cls:
            raise ValueError(f"tool {name!r} is already registered (by {TOOLS[name].__name__})")
        cls.name = name
        TOOLS[name] = cls
        return cls
    return add


def make_tool(name: str, **kwargs) -> Any:
    if name not in TOOLS:
        raise ValueError(f"unknown tool {name!r}; registered tools: {sorted(TOOLS)} (add one with register_tool)")
    return TOOLS[name](**kwargs)


def bounded(text: str, max_chars: int) -> str:
    """`text` cut to `max_chars`, saying how much was dropped (the model should know its output is partial)."""
    if len(text) <= max_chars:
        return text
    note = f"...[{len(text) - max_chars} more chars]"
    return text[:max(0, max_chars - len(note))] + note


# ------------------------------------------------------------------------------------------------ calculator

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
           ast.Mod: operator.mod, ast.Pow: operator.pow, ast.Div: operator.truediv}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}


@register_tool("calculator")
@dataclasses.dataclass
class Calculator:
    """Exact arithmetic on integers and floats: + - * / // % ** and parentheses, nothing else (no names, no
    calls), so it needs no sandbox. Big integers are exact; exponents and result sizes are bounded."""

    max_chars: int = 200  # longest result text
    max_exponent: int = 256  # ** refuses larger exponents (a 10**10**10 would hang the host)
    max_digits: int = 200  # results with more digits are refused

    def _eval(self, node):
        if isinstance(node, ast.Expression):
            return self._eval(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _UNARY[type(node.op)](self._eval(node.operand))
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            a, b = self._eval(node.left), self._eval(node.right)
            if isinstance(node.op, ast.Pow) and abs(b) > self.max_exponent:
                raise ValueError(f"exponent {b} is above {self.max_exponent}")
            out = _BINARY[type(node.op)](a, b)
            if isinstance(out, int) and out.bit_length() > self.max_digits * 3.33:
                raise ValueError(f"result has more than {self.max_digits} digits")
            return out
        raise ValueError(f"unsupported expression element {type(node).__name__}")

    def __call__(self, args: str) -> ToolResult:
        expr = args.strip()
        if len(expr) > 1000:
            return ToolResult("error: expression too long", False)
        try:
            value = self._eval(ast.parse(expr, mode="eval"))
        except ZeroDivisionError:
            return ToolResult("error: division by zero", False)
        except (SyntaxError, ValueError, TypeError, OverflowError, RecursionError, MemoryError) as e:
            return ToolResult(bounded(f"error: {type(e).__name__}: {e}", self.max_chars), False)
        if isinstance(value, float) and value.is_integer() and abs(value) < 2 ** 53:
            value = int(value)
        return ToolResult(bounded(str(value), self.max_chars), True)


# ------------------------------------------------------------------------------------------------ python


@register_tool("python")
@dataclasses.dataclass
class PythonTool:
    """Runs the call as a Python program in the code sandbox (`rewards.sandbox`: bubblewrap, rlimits, no network)
    and returns what it printed. A crash returns its last error line, a timeout or an output flood a one-line
    message; never an exception."""

    max_chars: int = 400  # longest observation text
    timeout_s: float = 5.0  # wall clock of one call (the sandbox's own limit)
    cpu_time_s: int = 4
    memory_bytes: int = 1 << 30
    max_output_bytes: int = 1 << 16  # the program is killed once it prints more
    workers: Optional[int] = None  # parallel sandbox processes (None: the number of CPUs)

    def __post_init__(self):
        from jaxrl_reason.rewards.sandbox import SandboxConfig, get_sandbox
        self._sandbox = get_sandbox(SandboxConfig(timeout_s=self.timeout_s, test_timeout_s=self.timeout_s,
                                                  cpu_time_s=self.cpu_time_s, memory_bytes=self.memory_bytes,
                                                  max_output_bytes=self.max_output_bytes,
                                                  details_output_chars=self.max_chars * 4, workers=self.workers))

    def __call__(self, args: str) -> ToolResult:
        from jaxrl_reason.rewards.sandbox import Job
        code = _strip_fence(args)
        r = self._sandbox.run(Job(program=code, mode="assert", cases=()))
        out = r.get("output", "")
        status = r.get("status")
        if status == "passed":
            return ToolResult(bounded(out.rstrip("\n") or "(no output)", self.max_chars), True)
        if r.get("timeout"):
            msg = f"error: timed out after {self.timeout_s:g}s"
        elif r.get("output_limit_exceeded"):
            msg = f"error: output above {self.max_output_bytes} bytes; print less"
        elif status == "program_error":
            msg = "error: " + (r.get("program_error") or "the program failed").strip().splitlines()[-1]
        elif status == "sandbox_error":
            msg = "error: the sandbox could not run the program"
        else:
            msg = f"error: the program died ({r.get('killed_by') or status})"
        return ToolResult(bounded(msg, self.max_chars), False)


def _strip_fence(code: str) -> str:
    """A call body written as a ```python fenced block runs without the fence."""
    m = re.fullmatch(r"\s*```(?:python|py)?\s*\n(.*?)\n?```\s*", code, re.S)
    return m.group(1) if m else code


# ------------------------------------------------------------------------------------------------ environment


class Call(NamedTuple):
    tool: str
    args: str


class ToolEnv:
    """One episode of tool-integrated reasoning. `reset(example)` returns the first user message (the task's
    prompt plus how to call the tools); `step(turn_text)` reads the model's latest turn: a call to a known tool
    (the last `<name>...</name>` in the turn) gets the tool's output as observation; a turn without a call ends
    the episode (the task's reward grades the answer). Episode statistics are kept for the metrics."""

    def __init__(self, tools: Sequence[Any], prompt_fn: Callable[[str], str], *, instructions: bool = True):
        if not tools:
            raise ValueError("ToolEnv needs at least one tool")
        self.tools = {t.name: t for t in tools}
        self.prompt_fn, self.instructions = prompt_fn, instructions
        names = "|".join(re.escape(n) for n in self.tools)
        self._call_re = re.compile(rf"<({names})>(.*?)</\1>", re.S)
        self.calls: list[Call] = []
        self.results: list[ToolResult] = []

    @property
    def stop_strings(self) -> tuple[str, ...]:
        return tuple(f"</{n}>" for n in self.tools)

    def reset(self, example) -> str:
        self.calls, self.results = [], []
        return self.first_message(example.question)

    def first_message(self, question: str) -> str:
        """The task's prompt for `question`, then (with `instructions`) the tools' call syntax."""
        msg = self.prompt_fn(question)
        if self.instructions:
            msg += " Tools: " + ", ".join(f"<{n}>...</{n}>" for n in self.tools) + "."
        return msg

    def parse(self, turn_text: str) -> Optional[Call]:
        found = list(self._call_re.finditer(turn_text))
        return Call(found[-1].group(1), found[-1].group(2)) if found else None

    def step(self, turn_text: str) -> Step:
        call = self.parse(turn_text)
        if call is None:
            return Step(None, True)
        try:
            res = self.tools[call.tool](call.args)
        except Exception as e:  # noqa: BLE001 - a user tool's bug costs one observation, never the run
            res = ToolResult(f"error: the {call.tool} tool failed ({type(e).__name__})", False)
        self.calls.append(call)
        self.results.append(res)
        return Step(res.text, False)


def step_all(envs: Sequence[ToolEnv], texts: Sequence[Optional[str]], *, workers: int = 16) -> list[Optional[Step]]:
    """`envs[i].step(texts[i])` for every i whose text is not None, concurrently: a turn waits for its slowest
    call, not for the sum of them (the sandbox and most user tools wait on processes or I/O, not the GIL)."""
    todo = [i for i, t in enumerate(texts) if t is not None]
    out: list[Optional[Step]] = [None] * len(texts)
    if not todo:
        return out
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(workers, len(todo)))) as pool:
        for i, s in zip(todo, pool.map(lambda i: envs[i].step(texts[i]), todo)):
            out[i] = s
    return out
