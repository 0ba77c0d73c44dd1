"""The second testbed task (docs/tasks/testbed.md): colour a small graph with k colours so that no edge joins two
nodes of one colour. Checking is local (look up both ends of every edge); producing a colouring needs a search
(a first-fit choice can paint the graph into a corner).

The graph has a planted k-colouring (every edge joins two different planted colours), so it is always solvable.
The worked solution is the first valid colouring in node order (backtracking over colours in their listed order),
one node per line, then the boxed assignment. Each instance also yields, from the same graph, wrong solutions of a
named error kind, CURE critiques of them (the four fields of docs/methods/cure.md#spec-critique) and corrections (wrong
attempt -> right solution) for CIPO.

Text formats (nodes single capital letters, colours single lower-case letters, each written after a space so that
under the task-trained BPE a node or colour is the same token everywhere):
    question  "Edges: A C, B D, ...\\nColour the nodes A B C D with r g b so that no edge joins one colour."
    solution  "- A r\\n- B r\\n- C g\\n- D g\\n\\\\boxed{ A r, B r, C g, D g}"
"""
from __future__ import annotations

import dataclasses
import itertools
import re
import string
from typing import Optional, Sequence

import numpy as np

from jaxrl_reason.data.datasets import Example
from jaxrl_reason.data import testbed
from jaxrl_reason.rewards.math import extract_boxed

COLOURS = "rgbyc"
# The constraint a wrong answer violates first, in the order `error_kind` checks them.
ERROR_KINDS = ("no_answer", "incomplete", "conflict")
INJECTABLE_KINDS = ("incomplete", "conflict")
_QUESTION_RE = re.compile(r"^Edges: (?P<edges>.*)\nColour the nodes (?P<nodes>[A-Z](?: [A-Z])*) with "
                          r"(?P<colours>[a-z](?: [a-z])*) so that no edge joins one colour\.$")


@dataclasses.dataclass(frozen=True)
class GraphColourConfig:
    nodes: int = 6
    colours: int = 3
    edges: int = 7

    def __post_init__(self):
        if not 2 <= self.colours <= len(COLOURS):
            raise ValueError(f"graph_colour colours={self.colours} must be in [2, {len(COLOURS)}]")
        if not 2 <= self.nodes <= 26:
            raise ValueError(f"graph_colour nodes={self.nodes} must be in [2, 26]")
        if self.edges < 1:
            raise ValueError(f"graph_colour edges={self.edges} must be >= 1")


def _first_colouring(nodes: Sequence[str], edges: Sequence[tuple], colours: str) -> Optional[dict]:
    """The first valid colouring in node order, colours tried in their listed order (backtracking)."""
    nbrs = {v: set() for v in nodes}
    for a, b in edges:
        nbrs[a].add(b)
        nbrs[b].add(a)
    out: dict = {}

    def go(i):
        if i == len(nodes):
            return True
        v = nodes[i]
        for c in colours:
            if all(out.get(u) != c for u in nbrs[v]):
                out[v] = c
                if go(i + 1):
                    return True
                del out[v]
        return False

    return dict(out) if go(0) else None


def make_instance(rng: np.random.Generator, config: GraphColourConfig) -> dict:
    """{"nodes": [...] in question order, "colours": "rgb", "edges": [(a, b), ...], "colouring": {node: colour}}."""
    colours = COLOURS[:config.colours]
    for _ in range(1000):
        nodes = [str(x) for x in rng.choice(list(string.ascii_uppercase), size=config.nodes, replace=False)]
        planted = {v: colours[int(rng.integers(len(colours)))] for v in nodes}
        pairs = [(a, b) for a, b in itertools.combinations(nodes, 2) if planted[a] != planted[b]]
        if len(pairs) < config.edges:
            continue
        pick = rng.choice(len(pairs), size=config.edges, replace=False)
        edges = [pairs[i] if rng.random() < 0.5 else pairs[i][::-1] for i in pick]
        return {"nodes": nodes, "colours": colours, "edges": [list(e) for e in edges],
                "colouring": _first_colouring(nodes, edges, colours)}
    raise ValueError(f"graph_colour: no {config} graph found; lower edges")


def question_text(inst: dict) -> str:
    edges = ", ".join(f"{a} {b}" for a, b in inst["edges"])
    return (f"Edges: {edges}\nColour the nodes {' '.join(inst['nodes'])} with {' '.join(inst['colours'])} "
            "so that no edge joins one colour.")


def parse_question(question: str) -> tuple[list, list, str]:
    """-> (edges as (a, b) tuples, nodes, colours) from a question's text."""
    m = _QUESTION_RE.match(question.strip())
    if m is None:
        raise ValueError(f"not a graph_colour question: {question[:60]!r}")
    edges = [tuple(e.split(" ")) for e in m.group("edges").split(", ")]
    return edges, m.group("nodes").split(" "), m.group("colours").replace(" ", "")


def node_line(v: str, c: str) -> str:
    return f"- {v} {c}"


def solution_text(assignment: Sequence[tuple]) -> str:
    """One "- node colour" line per assigned node, in the order given, then the boxed assignment."""
    lines = [node_line(v, c) for v, c in assignment]
    return "\n".join(lines + ["\\boxed{ " + ", ".join(f"{v} {c}" for v, c in assignment) + "}"])


def parse_colouring(text: str) -> Optional[list[tuple]]:
    """The boxed [(node, colour), ...] of a model output, or None when there is no box or it does not parse."""
    boxed = extract_boxed(text) if isinstance(text, str) else None
    if boxed is None:
        return None
    out = []
    for part in boxed.split(","):
        bits = part.split()
        if len(bits) != 2 or not re.fullmatch(r"[A-Z]", bits[0]) or not re.fullmatch(r"[a-z]", bits[1]):
            return None
        out.append((bits[0], bits[1]))
    return out or None


def first_conflict(question: str, assignment: Sequence[tuple]) -> Optional[tuple]:
    """The listed edge (a, b) whose ends share a colour and whose later end (in the assignment's order) comes
    first; None when there is none."""
    edges, _, _ = parse_question(question)
    col = dict(assignment)
    pos = {v: i for i, (v, _) in enumerate(assignment)}
    bad = [(a, b) for a, b in edges if a in col and b in col and col[a] == col[b]]
    return min(bad, key=lambda e: max(pos[e[0]], pos[e[1]])) if bad else None


def error_kind(question: str, assignment: Optional[Sequence[tuple]]) -> Optional[str]:
    """The first constraint `assignment` violates (ERROR_KINDS), or None when it is a right answer: every node
    exactly once, each with a listed colour, and no edge joining one colour."""
    _, nodes, colours = parse_question(question)
    if not assignment:
        return "no_answer"
    names = [v for v, _ in assignment]
    if sorted(names) != sorted(nodes) or any(c not in colours for _, c in assignment):
        return "incomplete"
    if first_conflict(question, assignment) is not None:
        return "conflict"
    return None


def _gold(inst: dict) -> list[tuple]:
    return [(v, inst["colouring"][v]) for v in inst["nodes"]]


def graph_colour_examples(n: int, *, seed: int, config: GraphColourConfig = GraphColourConfig()) -> list[Example]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        inst = make_instance(rng, config)
        gold = _gold(inst)
        out.append(Example(question=question_text(inst), answer=", ".join(f"{v} {c}" for v, c in gold),
                           id=f"graph_colour-{seed}-{i}", solution=solution_text(gold),
                           meta={"source": "graph_colour", **inst}))
    return out


# ----------------------------------------------------------------------------------------------------------------
# Wrong solutions of a named kind, and what they teach: verify rows, critiques, corrections
# ----------------------------------------------------------------------------------------------------------------
def inject_error(e: Example, kind: str, rng: np.random.Generator) -> list[tuple]:
    """A wrong assignment for `e` whose first violated constraint is `kind` (INJECTABLE_KINDS): `conflict`
    recolours one end of a random edge to the other end's colour; `incomplete` drops one node."""
    gold = _gold(e.meta)
    if kind == "conflict":
        a, b = e.meta["edges"][int(rng.integers(len(e.meta["edges"])))]
        col = dict(gold)
        if rng.random() < 0.5:
            a, b = b, a
        col[b] = col[a]
        return [(v, col[v]) for v in e.meta["nodes"]]
    if kind == "incomplete":
        drop = int(rng.integers(len(gold)))
        return gold[:drop] + gold[drop + 1:]
    raise ValueError(f"error kind {kind!r} is unknown; use {' | '.join(INJECTABLE_KINDS)}")


_WHY = {
    "conflict": "This node gets the same colour as a node it shares an edge with, so that edge joins one colour.",
    "incomplete": "The answer does not give every node of the problem exactly one of the listed colours.",
}
_HINT = {
    "conflict": "Before colouring each node, look up every edge that touches it and avoid the colours already "
                "given to its neighbours.",
    "incomplete": "Go through the nodes in the order the question lists them and give each one exactly one colour.",
}
GENERIC_HINT = ("Colour the nodes in order, and when a node has no colour left, go back and change an earlier "
                "choice instead of breaking an edge.")


def critique_text(question: str, assignment: Sequence[tuple], kind: Optional[str]) -> str:
    """The four-field critique (docs/methods/cure.md#spec-critique): for a conflict the quote is the line of the later
    end of the first conflicting edge, for an incomplete answer the boxed answer; the hint names the constraint, never a
    colour."""
    if kind is None:
        return ("ERROR_FOUND: false\nERROR_QUOTE: none\nWHY_IT_MATTERS: none\n"
                f"HIGH_LEVEL_HINT: {GENERIC_HINT}")
    if kind == "conflict":
        a, b = first_conflict(question, assignment)
        pos = {v: i for i, (v, _) in enumerate(assignment)}
        later = a if pos[a] > pos[b] else b
        quote = node_line(later, dict(assignment)[later])
    else:
        quote = solution_text(assignment).split("\n")[-1]
    return (f"ERROR_FOUND: true\nERROR_QUOTE: {quote}\nWHY_IT_MATTERS: {_WHY[kind]}\n"
            f"HIGH_LEVEL_HINT: {_HINT[kind]}")


# The mix `_wrong` draws injected kinds from: the warmed-up policy's own wrong samples (docs/results/testbed.md,
# 1,500 SFT steps: incomplete 256 of 256), with a 5% floor for the kind it did not make yet.
INJECT_WEIGHTS = {"incomplete": 0.95, "conflict": 0.05}


TASK = testbed.TestbedTask(
    source="graph_colour", gold=lambda e: _gold(e.meta), solution_text=solution_text, parse=parse_colouring,
    error_kind=error_kind, answer_text=lambda a: ", ".join(f"{v} {c}" for v, c in a), inject_error=inject_error,
    inject_weights=INJECT_WEIGHTS, critique_text=critique_text)

# The shared pieces (data/testbed.py) under this task's names.
text_error_kind, check, verify_target, _wrong, auxiliary_rows, graph_colour_reward = testbed.bound(TASK)
