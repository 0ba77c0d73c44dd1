"""A testbed task where checking is easier than solving: find the path from a start node to a goal node of a
path-star graph given as a shuffled edge list.

The graph is `arms` chains of `arm_len` nodes hanging off the start; the goal is the far end of one chain. Checking
a path is local (every hop is a listed edge, it starts at the start and ends at the goal); producing one needs the
first hop to be right, which a left-to-right reader can only know by searching from the goal backwards (cf. the
path-star task). Each instance also yields, from the same graph, wrong solutions of a named error kind, CURE
critiques of them (the four fields of docs/methods/cure.md#spec-critique) and corrections (wrong attempt -> right
solution) for CIPO.

Text formats (nodes are single capital letters; every edge is written "parent child", pointing away from the
start, so following the path is a look-up and only the first hop needs the search):
    question  "Edges: K D, A K, ...\nFind a path from A to D."
    solution  "- A K\n- K D\n\\boxed{ A K D}"    (one hop per line, each a copy of the listed edge it uses, then the
                                                  boxed node sequence)
Every node letter is written after a space (" K"), so under the task-trained BPE a node is the same token in the
edge list, in the hop lines and in the boxed path: a hop is a copy of a listed bigram.
"""
from __future__ import annotations

import dataclasses
import re
import string
from typing import Optional, Sequence

import numpy as np

from jaxrl_reason.data.datasets import Example
from jaxrl_reason.data import testbed
from jaxrl_reason.rewards.math import extract_boxed

# The constraint a wrong answer violates first, in the order `error_kind` checks them.
ERROR_KINDS = ("no_answer", "wrong_start", "non_edge", "revisit", "wrong_end")
# The kinds `inject_error` can write (no_answer is a format failure, not a reasoning error).
INJECTABLE_KINDS = ("wrong_start", "non_edge", "revisit", "wrong_end")
_QUESTION_RE = re.compile(r"^Edges: (?P<edges>.*)\nFind a path from (?P<s>[A-Z]) to (?P<t>[A-Z])\.$")
_EDGE_RE = re.compile(r"^([A-Z])[ -]([A-Z])$")


@dataclasses.dataclass(frozen=True)
class GraphPathConfig:
    arms: int = 3  # chains hanging off the start node (the first hop is a 1-in-`arms` choice without search)
    arm_len: int = 3  # nodes per chain; the goal is the last node of one chain

    def __post_init__(self):
        if self.arms < 2:
            raise ValueError(f"config data.graph_arms={self.arms} must be >= 2 (one arm needs no search)")
        if self.arm_len < 1:
            raise ValueError(f"config data.graph_arm_len={self.arm_len} must be >= 1")
        if self.arms * self.arm_len + 1 > len(string.ascii_uppercase):
            raise ValueError(f"config data.graph_arms * data.graph_arm_len + 1 = {self.arms * self.arm_len + 1} "
                             "nodes; the single-letter labels allow at most 26; make the graph smaller")


def _edge(a: str, b: str) -> frozenset:
    return frozenset((a, b))


def make_instance(rng: np.random.Generator, config: GraphPathConfig) -> dict:
    """One random path-star graph: {"edges": [(a, b), ...] shuffled, "start", "goal", "path", "arms"}."""
    n = config.arms * config.arm_len + 1
    labels = [str(x) for x in rng.choice(list(string.ascii_uppercase), size=n, replace=False)]
    start, rest = labels[0], labels[1:]
    arms = [rest[i * config.arm_len:(i + 1) * config.arm_len] for i in range(config.arms)]
    edges = []
    for arm in arms:
        chain = [start] + list(arm)
        edges += list(zip(chain, chain[1:]))  # "parent child": pointing away from the start
    order = rng.permutation(len(edges))
    edges = [edges[i] for i in order]
    goal_arm = int(rng.integers(config.arms))
    path = [start] + list(arms[goal_arm])
    return {"edges": [list(e) for e in edges], "start": start, "goal": path[-1], "path": path,
            "arms": [list(a) for a in arms]}


def question_text(inst: dict) -> str:
    edges = ", ".join(f"{a} {b}" for a, b in inst["edges"])
    return f"Edges: {edges}\nFind a path from {inst['start']} to {inst['goal']}."


def parse_question(question: str) -> tuple[set, str, str]:
    """-> (edge set of frozensets, start, goal) from a question's text."""
    m = _QUESTION_RE.match(question.strip())
    if m is None:
        raise ValueError(f"not a graph_path question: {question[:60]!r}")
    edges = set()
    for e in m.group("edges").split(", "):
        em = _EDGE_RE.match(e.strip())
        if em is None:
            raise ValueError(f"not a graph_path edge: {e!r}")
        edges.add(_edge(*em.groups()))
    return edges, m.group("s"), m.group("t")


def hop_line(a: str, b: str) -> str:
    """One hop of the worked solution: a copy of the listed edge "a b" it moves along."""
    return f"- {a} {b}"


def boxed_path(path: Sequence[str]) -> str:
    """The boxed node sequence. A space after the brace keeps the first node the token " A" it is everywhere else
    (without it the BPE's pre-tokenizer makes "{A" one piece: the policy miswrote that first node in 967 of 1,024
    samples, docs/results/testbed.md)."""
    return "\\boxed{ " + " ".join(path) + "}"


def solution_text(path: Sequence[str]) -> str:
    """The worked-solution format: one hop per line (each a copy of the listed edge), then the boxed path."""
    hops = [hop_line(a, b) for a, b in zip(path, path[1:])]
    return "\n".join(hops + [boxed_path(path)])


def parse_path(text: str) -> Optional[list[str]]:
    """The boxed node sequence of a model output, or None when there is none or it is not single letters."""
    boxed = extract_boxed(text) if isinstance(text, str) else None
    if boxed is None:
        return None
    nodes = boxed.replace(",", " ").replace("->", " ").split()
    if not nodes or not all(len(x) == 1 and x in string.ascii_uppercase for x in nodes):
        return None
    return nodes


def error_kind(question: str, path: Optional[Sequence[str]]) -> Optional[str]:
    """The first constraint `path` violates (ERROR_KINDS), or None when it is a right answer: a simple path from
    the start to the goal whose every hop is a listed edge."""
    edges, s, t = parse_question(question)
    if not path:
        return "no_answer"
    if path[0] != s:
        return "wrong_start"
    if any(_edge(a, b) not in edges for a, b in zip(path, path[1:])):
        return "non_edge"
    if len(set(path)) != len(path):
        return "revisit"
    if path[-1] != t or len(path) < 2:
        return "wrong_end"
    return None


def graph_path_examples(n: int, *, seed: int, config: GraphPathConfig = GraphPathConfig()) -> list[Example]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        inst = make_instance(rng, config)
        out.append(Example(question=question_text(inst), answer=" ".join(inst["path"]), id=f"graph_path-{seed}-{i}",
                           solution=solution_text(inst["path"]), meta={"source": "graph_path", **inst}))
    return out


# ----------------------------------------------------------------------------------------------------------------
# Wrong solutions of a named kind, and what they teach: verify rows, critiques, corrections
# ----------------------------------------------------------------------------------------------------------------
def inject_error(e: Example, kind: str, rng: np.random.Generator) -> list[str]:
    """A wrong path for `e` whose first violated constraint is `kind` (INJECTABLE_KINDS). The kinds mirror what a
    left-to-right solver does wrong: take the wrong arm (wrong_end), skip a node (non_edge), step back onto a
    node (revisit), or start elsewhere (wrong_start)."""
    inst = e.meta
    path, start = list(inst["path"]), inst["start"]
    others = [a for a in inst["arms"] if a[-1] != inst["goal"]]
    if kind == "wrong_end":
        arm = others[int(rng.integers(len(others)))]
        cut = int(rng.integers(1, len(arm) + 1))  # stop anywhere along the wrong arm
        return [start] + list(arm[:cut])
    if kind == "non_edge":
        if len(path) >= 3:
            drop = int(rng.integers(1, len(path) - 1))
            return path[:drop] + path[drop + 1:]
        arm = others[int(rng.integers(len(others)))]  # arm_len 1: jump from a wrong leaf to the goal
        return [start, arm[0], path[-1]]
    if kind == "revisit":
        cut = int(rng.integers(1, len(path)))  # walk forward, step back one node, then go on to the goal
        return path[:cut + 1] + [path[cut - 1]] + path[cut:]
    if kind == "wrong_start":
        wrong = path[1] if len(path) > 1 else others[0][0]
        return [wrong] + path[1:] if path[1:] and path[1] != wrong else [wrong] + path
    raise ValueError(f"error kind {kind!r} is unknown; use {' | '.join(INJECTABLE_KINDS)}")


def _first_bad_hop(question: str, path: Sequence[str], kind: str) -> int:
    """Index i of the hop path[i] -> path[i+1] that is the earliest error of `kind`."""
    edges, s, t = parse_question(question)
    if kind == "wrong_start":
        return 0
    if kind == "non_edge":
        return next(i for i, (a, b) in enumerate(zip(path, path[1:])) if _edge(a, b) not in edges)
    if kind == "revisit":
        seen = set()
        for i, x in enumerate(path):
            if x in seen:
                return i - 1
            seen.add(x)
    return 0  # wrong_end: the answer went wrong at the first hop, into an arm that does not reach the goal


_WHY = {
    "wrong_start": "The path has to begin at the start node named in the problem, and this one begins elsewhere.",
    "non_edge": "This hop is not in the edge list, so the path uses a connection the graph does not have.",
    "revisit": "This hop returns to a node the path already visited, so it is not a simple path.",
    "wrong_end": "This first hop enters a branch that never reaches the goal, so the path ends at the wrong node.",
}
_HINT = {
    "wrong_start": "Begin the path exactly at the start node the question names and write that node first.",
    "non_edge": "Before writing each hop, look it up in the edge list and only move along edges that are listed.",
    "revisit": "Each node may appear only once, so never step back onto a node that is already on the path.",
    "wrong_end": "Work backwards from the goal: find the one edge that reaches it, then repeat until the start.",
}
GENERIC_HINT = "Trace the chain backwards from the goal along listed edges, then write it out from the start."


def critique_text(question: str, path: Sequence[str], kind: Optional[str]) -> str:
    """The four-field critique (docs/methods/cure.md#spec-critique) of `path`: for a wrong one, the quote is its
    earliest faulty hop line and the hint names the violated constraint as a strategy (never a node of the answer); for
    a right one, no error and a general strategy."""
    if kind is None:
        return ("ERROR_FOUND: false\nERROR_QUOTE: none\nWHY_IT_MATTERS: none\n"
                f"HIGH_LEVEL_HINT: {GENERIC_HINT}")
    if len(path) < 2:
        quote = boxed_path(path)
    else:
        i = _first_bad_hop(question, path, kind)
        quote = hop_line(path[i], path[i + 1])
    return (f"ERROR_FOUND: true\nERROR_QUOTE: {quote}\nWHY_IT_MATTERS: {_WHY[kind]}\n"
            f"HIGH_LEVEL_HINT: {_HINT[kind]}")


# The mix `_wrong` draws injected kinds from: the warmed-up policy's own wrong samples under this format
# (docs/results/testbed.md, 2 arms x 3 nodes, 2,500 SFT steps: non_edge 967, wrong_start 49 of 1,016), with a
# floor of 5% for the kinds it did not make yet, so every kind is seen.
INJECT_WEIGHTS = {"non_edge": 0.85, "wrong_start": 0.05, "revisit": 0.05, "wrong_end": 0.05}


TASK = testbed.TestbedTask(
    source="graph_path", gold=lambda e: list(e.meta["path"]), solution_text=solution_text, parse=parse_path,
    error_kind=error_kind, answer_text=" ".join, inject_error=inject_error, inject_weights=INJECT_WEIGHTS,
    critique_text=critique_text)

# The shared pieces (data/testbed.py) under this task's names.
text_error_kind, check, verify_target, _wrong, auxiliary_rows, graph_path_reward = testbed.bound(TASK)
