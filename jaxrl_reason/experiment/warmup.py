"""The warm-ups before RL: supervised fine-tuning on worked solutions (and the auxiliary formats), then rows built
from the warmed-up policy's own attempts (critiques, corrections), then (RL^V's cold start) the self-labelled
verification warm-up; their checks run at start-up, before any of them trains."""
from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import time

from jaxrl_reason.experiment.config import RunConfig
from jaxrl_reason.data.prompts import (CORRECTION_FORMATS, CRITIQUE_FORMATS, GUIDED_LAYOUTS, PROMPT_WORDINGS,
                                       whole_turn_prompt_fn)
from jaxrl_reason.data.testbed import (CHECK_FORMATS, CHECK_ROWS, INJECT_EXTENTS, VERIFY_FORMATS, auxiliary_rows,
                                       own_attempt_rows, task_of)
from jaxrl_reason.experiment.data import AUX_FORMATS, TaskData
from jaxrl_reason.experiment.model import build_model, load_hf, save_hf


def stage_asked(rc: RunConfig, knob: str, needs_sft: str) -> bool:
    """Whether the warm-up stage of `sft.<knob>` (its step count) runs; refuses a negative count, and the stage
    without the SFT it follows (`needs_sft`: what it needs the SFT for)."""
    steps = getattr(rc.sft, knob)
    if steps < 0:
        raise ValueError(f"config sft.{knob}={steps} must be >= 0 (0 = the stage is off)")
    if steps > 0 and rc.sft.steps <= 0:
        raise ValueError(f"config sft.{knob} > 0 needs the SFT warm-up (sft.steps > 0): {needs_sft}")
    return steps > 0


WARMUP_CHECKPOINTS = "warmup_checkpoints"  # <workdir>/ folder of the warm-up stages' checkpoints (sft.checkpoint_every)


def stage_checkpoints(rc: RunConfig, workdir: str, stage: str) -> dict:
    """`sft_train`'s checkpoint arguments for the warm-up stage `stage`: its own folder under
    <workdir>/WARMUP_CHECKPOINTS, saved every `sft.checkpoint_every` steps; no folder when that is 0."""
    every = rc.sft.checkpoint_every
    if every < 0:
        raise ValueError(f"config sft.checkpoint_every={every} must be >= 0 (0 = the warm-up stages keep no "
                         "checkpoints)")
    if every == 0:
        return {"checkpoint_dir": None}
    return {"checkpoint_dir": os.path.join(workdir, WARMUP_CHECKPOINTS, stage), "checkpoint_every": every}


def check_verify_warmup(rc: RunConfig) -> None:
    """Fails before any training when the verification warm-up, or an auxiliary warm-up format, is asked for but
    cannot run."""
    stage_checkpoints(rc, "", "sft")
    stage_order(rc)
    check_aux_formats(rc)
    check_own_attempts(rc)
    check_check_warmup(rc)
    s = rc.sft
    if not stage_asked(rc, "verify_steps", "the verification warm-up runs right after it, on its questions"):
        return
    contrast = verify_contrast_fn(rc)  # raises on an unknown or unusable sft.verify_contrast
    if s.verify_samples < 0 or (s.verify_samples == 0 and contrast is None):
        raise ValueError(f"config sft.verify_samples={s.verify_samples} must be >= 1 (self-labelled rows), or 0 "
                         "with sft.verify_contrast='slips' (contrast pairs only)")
    if not 0 < s.verify_questions <= s.examples:
        raise ValueError(f"config sft.verify_questions={s.verify_questions} must be in [1, sft.examples={s.examples}]; "
                         "the verification warm-up samples on warm-up questions only (RL's are kept unseen)")


def verify_contrast_fn(rc: RunConfig, contrast: str = ""):
    """`sft.verify_contrast` (or `contrast`) as the warm-up's `contrast_fn`: None for "none", the data source's
    one-slip copies of worked solutions for "slips" (arithmetic only)."""
    contrast = contrast or rc.sft.verify_contrast
    if contrast == "none":
        return None
    if contrast != "slips":
        raise ValueError(f"config sft.verify_contrast={contrast!r} is unknown; use none | slips")
    if rc.data.source != "arithmetic":
        raise ValueError(f"config sft.verify_contrast='slips' needs data.source='arithmetic' (its worked solutions "
                         f"get one slip each), got {rc.data.source!r}; set sft.verify_contrast='none'")
    style = rc.data.solution_style
    if style not in ("compact", "rewrite"):
        raise ValueError(f"config sft.verify_contrast='slips' needs data.solution_style 'compact' or 'rewrite', got "
                         f"{style!r}")
    from jaxrl_reason.data.arithmetic import slipped_example_solution

    return functools.partial(slipped_example_solution, style=style)


def check_aux_formats(rc: RunConfig) -> None:
    """Fails at start-up when auxiliary warm-up formats are asked for but the data source cannot write them."""
    s = rc.sft
    if rc.data.guided_layout not in GUIDED_LAYOUTS:
        raise ValueError(f"config data.guided_layout={rc.data.guided_layout!r} is unknown; use "
                         f"{' | '.join(GUIDED_LAYOUTS)}")
    if rc.data.prompt_wording not in PROMPT_WORDINGS:
        raise ValueError(f"config data.prompt_wording={rc.data.prompt_wording!r} is unknown; use "
                         f"{' | '.join(PROMPT_WORDINGS)}")
    shares = {"aux_verify_share": s.aux_verify_share, "aux_critique_share": s.aux_critique_share,
              "aux_correct_share": s.aux_correct_share, "aux_guided_share": s.aux_guided_share}
    for name, v in shares.items():
        if v < 0:
            raise ValueError(f"config sft.{name}={v} must be >= 0 (a share of sft.examples)")
    if any(shares.values()) and rc.data.source not in AUX_FORMATS:
        raise ValueError(f"config sft.aux_*_share > 0 needs a data source that writes the auxiliary formats "
                         f"({' | '.join(AUX_FORMATS)}), got data.source={rc.data.source!r}; set the shares to 0")
    if rc.data.source == "latin_square":
        from jaxrl_reason.data.latin_square import SOLUTION_FORMATS

        if rc.data.latin_solution not in SOLUTION_FORMATS:
            raise ValueError(f"config data.latin_solution={rc.data.latin_solution!r} is unknown; use "
                             f"{' | '.join(SOLUTION_FORMATS)}")
    if rc.data.source == "latin_square" and rc.data.latin_solution != "grid" and any(shares.values()):
        # their injected wrong answers are written as bare grids, unlike a policy that writes deductions
        raise ValueError(f"config sft.aux_*_share > 0 writes its rows' answers as bare grids; with "
                         f"data.latin_solution={rc.data.latin_solution!r} set the shares to 0 (own-attempt rows, "
                         "sft.own_attempt_steps, show the policy's own deductions)")
    if rc.tokenizer.aux_corpus:
        if rc.tokenizer.path or rc.model.gguf_path:
            raise ValueError("config tokenizer.aux_corpus=True trains the task BPE on the auxiliary rows, but the "
                             "tokenizer is loaded (tokenizer.path / model.gguf_path); set aux_corpus=False")
        if not any(shares.values()):
            raise ValueError("config tokenizer.aux_corpus=True needs auxiliary rows to train on: set an "
                             "sft.aux_*_share > 0, or aux_corpus=False")
    extent = rc.data.inject_extent
    if extent not in INJECT_EXTENTS:
        raise ValueError(f"config data.inject_extent={extent!r} is unknown; use {' | '.join(INJECT_EXTENTS)}")
    if extent != "minimal" and any(shares.values()) and task_of(rc.data.source).inject_spread is None:
        raise ValueError(f"config data.inject_extent={extent!r}: data.source={rc.data.source!r} has no spread "
                         "injector (latin_square has); set data.inject_extent='minimal'")
    fmt = rc.data.verify_format
    if fmt not in VERIFY_FORMATS:
        raise ValueError(f"config data.verify_format={fmt!r} is unknown; use {' | '.join(VERIFY_FORMATS)}")
    if fmt in CHECK_FORMATS:
        if rc.data.source not in AUX_FORMATS or task_of(rc.data.source).check_text is None:
            with_check = [s for s in AUX_FORMATS if task_of(s).check_text is not None]
            raise ValueError(f"config data.verify_format={fmt!r} needs a task that writes a worked check "
                             f"({' | '.join(with_check)}), got data.source={rc.data.source!r}; use 'verdict'")
        if rc.data.check_tokens < 1:
            raise ValueError(f"config data.check_tokens={rc.data.check_tokens} must be >= 1: the verifier writes "
                             "its worked check in at most that many tokens")
        if s.verify_steps > 0:
            raise ValueError(f"config data.verify_format={fmt!r} teaches the check through the SFT rows "
                             "(sft.aux_verify_share, sft.check_steps); the verification warm-up (sft.verify_steps) "
                             "trains the one-token verdict only: set sft.verify_steps=0")
    for knob, known, plain in (("critique_format", CRITIQUE_FORMATS, "fields"),
                               ("correction_format", CORRECTION_FORMATS, "solution")):
        value = getattr(rc.data, knob)
        if value not in known:
            raise ValueError(f"config data.{knob}={value!r} is unknown; use {' | '.join(known)}")
        if value != plain and (rc.data.source not in AUX_FORMATS or task_of(rc.data.source).check_text is None):
            with_check = [s for s in AUX_FORMATS if task_of(s).check_text is not None]
            raise ValueError(f"config data.{knob}={value!r} needs a task that writes a worked check "
                             f"({' | '.join(with_check)}), got data.source={rc.data.source!r}; use {plain!r}")


def check_check_warmup(rc: RunConfig) -> None:
    """Fails at start-up when the worked-check warm-up (sft.check_steps > 0) is asked for but cannot run."""
    s = rc.sft
    if not stage_asked(rc, "check_steps", "the worked-check warm-up runs right after it, on its questions"):
        return
    if s.check_rows not in CHECK_ROWS:
        raise ValueError(f"config sft.check_rows={s.check_rows!r} is unknown; use {' | '.join(CHECK_ROWS)}")
    if s.check_rows == "verify" and rc.data.verify_format not in CHECK_FORMATS:
        raise ValueError(f"config sft.check_steps > 0 teaches a written check, but data.verify_format="
                         f"{rc.data.verify_format!r} has none; set data.verify_format to one of "
                         f"{' | '.join(CHECK_FORMATS)}, or sft.check_rows='critique', or sft.check_steps=0")
    for rows, knob in (("critique", "critique_format"), ("correction", "correction_format")):
        if s.check_rows == rows and getattr(rc.data, knob) != "worked_check":
            raise ValueError(f"config sft.check_rows={rows!r} teaches {rows}s that open with the check, but "
                             f"data.{knob}={getattr(rc.data, knob)!r}; set data.{knob}='worked_check'")
    if not 2 <= s.check_questions <= s.examples:
        raise ValueError(f"config sft.check_questions={s.check_questions} must be in [2, sft.examples={s.examples}]: "
                         "it trains on warm-up questions only (RL's are kept unseen) and holds one out at least")
    if s.check_batch_size < 1:
        raise ValueError(f"config sft.check_batch_size={s.check_batch_size} must be >= 1")
    if s.check_solve_share < 0:
        raise ValueError(f"config sft.check_solve_share={s.check_solve_share} must be >= 0")
    if s.check_guided_share < 0:
        raise ValueError(f"config sft.check_guided_share={s.check_guided_share} must be >= 0")
    if s.check_guided_share > 0 and s.check_rows != "critique":
        raise ValueError(f"config sft.check_guided_share={s.check_guided_share} mixes CURE's guided re-solves into "
                         f"the worked-check stage, but sft.check_rows={s.check_rows!r}; set sft.check_rows='critique' "
                         "or sft.check_guided_share=0")
    if not 0.0 <= s.check_target < 1.0:
        raise ValueError(f"config sft.check_target={s.check_target} must be in [0, 1): the held-out balanced accuracy "
                         "the stage trains towards (0 = one round of sft.check_steps)")
    if s.check_target > 0 and s.check_rounds < 1:
        raise ValueError(f"config sft.check_rounds={s.check_rounds} must be >= 1 with sft.check_target > 0")


OWN_ATTEMPT_FORMATS = ("critique", "correct", "guided")


def own_attempt_formats(rc: RunConfig) -> dict:
    """{"critique": bool, "correct": bool, "guided": bool}: the formats the own-attempt stage writes rows of -- by
    default (`sft.own_attempt_formats = "aux"`) those the warm-up teaches with an auxiliary share > 0, else the
    named ones."""
    spec = rc.sft.own_attempt_formats
    if spec == "aux":
        return {f: getattr(rc.sft, f"aux_{f}_share") > 0 for f in OWN_ATTEMPT_FORMATS}
    names = [n.strip() for n in spec.split(",")]
    bad = [n for n in names if n not in OWN_ATTEMPT_FORMATS]
    if bad or not spec.strip():
        raise ValueError(f"config sft.own_attempt_formats={spec!r}: use 'aux' or a comma list of "
                         f"{' | '.join(OWN_ATTEMPT_FORMATS)} (unknown: {bad or [spec]})")
    return {f: f in names for f in OWN_ATTEMPT_FORMATS}


def check_own_attempts(rc: RunConfig) -> None:
    """Fails at start-up when the own-attempt stage (sft.own_attempt_steps > 0) is asked for but cannot run."""
    s = rc.sft
    formats = own_attempt_formats(rc)  # a misspelt format list is refused even with the stage off
    if not stage_asked(rc, "own_attempt_steps", "its rows are the warmed-up policy's own attempts"):
        return
    if rc.data.source not in AUX_FORMATS:
        raise ValueError(f"config sft.own_attempt_steps > 0 needs a testbed task ({' | '.join(AUX_FORMATS)}) to grade "
                         f"and critique the attempts, got data.source={rc.data.source!r}; set own_attempt_steps=0")
    if not any(formats.values()):
        raise ValueError("config sft.own_attempt_steps > 0 writes critique, correction and/or guided rows of the "
                         "policy's own attempts: set sft.aux_critique_share, aux_correct_share or aux_guided_share > 0 "
                         "(the formats it extends), or name them in sft.own_attempt_formats")
    if not 0 < s.own_attempt_questions <= s.examples:
        raise ValueError(f"config sft.own_attempt_questions={s.own_attempt_questions} must be in [1, sft.examples="
                         f"{s.examples}]: it samples on warm-up questions only (RL's are kept unseen)")
    if s.own_attempt_samples < 1:
        raise ValueError(f"config sft.own_attempt_samples={s.own_attempt_samples} must be >= 1")
    if s.own_attempt_keep_share < 0:
        raise ValueError(f"config sft.own_attempt_keep_share={s.own_attempt_keep_share} must be >= 0")
    if s.own_attempt_keep_share > 0 and not formats["correct"]:
        raise ValueError("config sft.own_attempt_keep_share > 0 keeps right attempts in correction rows: add the "
                         "correct format (sft.aux_correct_share > 0 or sft.own_attempt_formats) or set it to 0")
    if s.own_attempt_solve_share < 0:
        raise ValueError(f"config sft.own_attempt_solve_share={s.own_attempt_solve_share} must be >= 0")


def sft_examples(rc: RunConfig, task: TaskData) -> tuple[list, object]:
    """-> (the warm-up's rows, the prompt_fn that poses them): the first `sft.examples` worked solutions plus,
    when the sft.aux_*_share knobs ask for them, auxiliary-format rows built from those same problems. An
    auxiliary row's question is already its whole user turn, so the prompt function passes it through."""
    check_aux_formats(rc)
    s = rc.sft
    base = list(task.train[:s.examples])
    counts = {k: int(round(getattr(s, f"aux_{k}_share") * len(base)))
              for k in ("verify", "critique", "correct", "guided")}
    if not any(counts.values()):
        return base, task.prompt_fn
    aux = auxiliary_rows(task_of(rc.data.source), base, seed=rc.setup_seed, verify_format=rc.data.verify_format,
                         inject_extent=rc.data.inject_extent, guided_layout=rc.data.guided_layout,
                         prompt_wording=rc.data.prompt_wording,
                         critique_format=rc.data.critique_format, correction_format=rc.data.correction_format,
                         **counts)
    return base + aux, whole_turn_prompt_fn(aux, task.prompt_fn)


# Auxiliary rows the BPE sees beside the worked solutions: every critique / correction / verify row repeats its
# template's English verbatim, so a few hundred of each are enough for the merges to form.
TOKENIZER_AUX_ROWS = 1000


def tokenizer_corpus(rc: RunConfig, task: TaskData) -> tuple[list, object]:
    """-> (examples, prompt_fn) that `experiment.model.build_tokenizer` trains the task BPE on: the task's problems,
    and with `tokenizer.aux_corpus` first up to TOKENIZER_AUX_ROWS of the warm-up's auxiliary rows (the same rows
    `sft_examples` builds, whose question is the whole user turn)."""
    if not rc.tokenizer.aux_corpus:
        return list(task.train), task.prompt_fn
    rows, prompt_fn = sft_examples(rc, task)
    aux = rows[min(rc.sft.examples, len(task.train)):]
    return aux[:TOKENIZER_AUX_ROWS] + list(task.train), prompt_fn


def _writer(workdir: str, name: str):
    from jaxrl_reason.parallel.mesh import is_main_process
    from jaxrl_reason.train.metrics import MetricsWriter

    return MetricsWriter(os.path.join(workdir, name), enabled=is_main_process())


def tool_sft_examples(rc: RunConfig, task: TaskData, tokenizer, examples):
    """With `tools` on, the warm-up teaches the call syntax: each worked solution becomes the source's tool-using
    demonstration (`TaskData.tool_demo`), posed by the tool environment's first message, its tool turns masked
    from the loss as RL masks them. -> (examples, prompt_fn, span_weights)."""
    import dataclasses

    from jaxrl_reason.rollout.multiturn import demo_solution

    if task.tool_demo is None:
        raise ValueError(f"config tools.tools={rc.tools.tools} with an SFT warm-up, but data.source="
                         f"{rc.data.source!r} writes no tool demonstrations; set sft.steps=0 or use a source that "
                         "does (arithmetic)")
    if len(examples) != min(rc.sft.examples, len(task.train)):
        raise ValueError("config tools.tools with sft.aux_*_share > 0: auxiliary warm-up rows are not tool "
                         "demonstrations; set the aux shares to 0")
    env = rc.tools.make_env(task.prompt_fn)()
    out = []
    for e in examples:
        text, spans = demo_solution(task.tool_demo(e), tokenizer, rc.tools.observation_role)
        out.append(dataclasses.replace(e, solution=text, meta={**e.meta, "tool_spans": spans}))
    return out, env.first_message, lambda e: e.meta["tool_spans"]


def run_sft(rc: RunConfig, model, tokenizer, task: TaskData, workdir: str, mesh=None) -> float:
    """The supervised warm-up on the first `sft.examples` training problems; -> seconds. Logs to logs_sft/."""
    from jaxrl_reason.train.trainer import sft_train

    s = rc.sft
    writer = _writer(workdir, "logs_sft")
    t = time.time()
    examples, prompt_fn = sft_examples(rc, task)
    span_weights = None
    if rc.tools.enabled:
        examples, prompt_fn, span_weights = tool_sft_examples(rc, task, tokenizer, examples)
    sft_train(model, tokenizer, examples, steps=s.steps, batch_size=s.batch_size, lr=s.lr,
              warmup_steps=s.warmup_steps, seed=rc.setup_seed, writer=writer, progress=rc.rl.progress,
              prompt_fn=prompt_fn, mesh=mesh, pack=s.pack, span_weights=span_weights,
              **stage_checkpoints(rc, workdir, "sft"))
    writer.close()
    return time.time() - t


def run_verify_warmup(rc: RunConfig, model, tokenizer, task: TaskData, workdir: str, mesh=None) -> dict:
    """The self-labelled verification warm-up (`train/verify_warmup.py`) on the SFT slice's first questions."""
    from jaxrl_reason.train.verify_warmup import verify_warmup

    s = rc.sft
    writer = _writer(workdir, "logs_verify_warmup")
    t = time.time()
    res = verify_warmup(model, tokenizer, task.train[:s.verify_questions], task.reward_fn, steps=s.verify_steps,
                        batch_size=s.verify_batch_size, solve_batch_size=s.verify_solve_rows, lr=s.verify_lr,
                        warmup_steps=s.warmup_steps, samples_per_question=s.verify_samples, max_new_tokens=rc.rl.max_new_tokens,
                        balance=s.verify_balance, contrast_fn=verify_contrast_fn(rc),
                        temperature=rc.rl.temperature, seed=rc.setup_seed, progress=rc.rl.progress, writer=writer,
                        prompt_fn=task.prompt_fn, mesh=mesh, **stage_checkpoints(rc, workdir, "verify_warmup"))
    writer.close()
    res.pop("history")
    res["seconds"] = time.time() - t
    b, a = res["before"]["balanced_acc"], res["after"]["balanced_acc"]
    print(f"verification warm-up: {res['rows']} self-labelled + {res['contrast_rows']} contrast rows; held-out "
          f"balanced accuracy {b:.1%} -> {a:.1%}")
    return res


def check_guided_rows(rc: RunConfig, task: TaskData) -> list:
    """`sft.check_guided_share` x `sft.check_questions` CURE guided re-solve rows (`data.testbed.auxiliary_rows`:
    the problem and a hint, the worked solution) for the worked-check stage, from its training questions (not
    the held-out ones), in the run's guided layout; [] at share 0."""
    from jaxrl_reason.train.check_warmup import heldout_questions

    s = rc.sft
    n = int(round(s.check_guided_share * s.check_questions))
    if n <= 0:
        return []
    questions = list(task.train[heldout_questions(s.check_questions):s.check_questions])
    return auxiliary_rows(task_of(rc.data.source), questions, verify=0, critique=0, correct=0, guided=n,
                          seed=rc.setup_seed, guided_layout=rc.data.guided_layout,
                          critique_format=rc.data.critique_format,
                          prompt_wording=rc.data.prompt_wording)


def run_check_warmup(rc: RunConfig, model, tokenizer, task: TaskData, workdir: str, mesh=None) -> dict:
    """The worked-check warm-up (`train/check_warmup.py`) on the SFT slice's first `sft.check_questions`
    questions, with the slice's worked solutions mixed in. Logs to logs_check_warmup/."""
    from jaxrl_reason.train.check_warmup import check_warmup

    s = rc.sft
    writer = _writer(workdir, "logs_check_warmup")
    t = time.time()
    res = check_warmup(model, tokenizer, task_of(rc.data.source), task.train[:s.check_questions],
                       task.train[:s.examples], steps=s.check_steps, check_tokens=rc.data.check_tokens,
                       batch_size=s.check_batch_size, lr=s.check_lr, warmup_steps=s.warmup_steps,
                       solve_share=s.check_solve_share, seed=rc.setup_seed, verify_format=rc.data.verify_format,
                       inject_extent=rc.data.inject_extent, rows_as=s.check_rows, prompt_fn=task.prompt_fn,
                       writer=writer, progress=rc.rl.progress, mesh=mesh, pack=s.pack,
                       target=s.check_target, max_rounds=s.check_rounds if s.check_target > 0 else 1,
                       extra_rows=check_guided_rows(rc, task), **stage_checkpoints(rc, workdir, "check_warmup"))
    writer.close()
    res["seconds"] = time.time() - t
    b, a = res["before"]["balanced_acc"], res["after"]["balanced_acc"]
    rounds = "" if res["rounds"] == 1 else f" ({res['rounds']} rounds: " + ", ".join(
        f"{x:.1%}" for x in res["after_rounds"]) + ")"
    guided = f" + {res['extra_rows']} guided re-solves" if res["extra_rows"] else ""
    print(f"worked-check warm-up: {res['rows']} check rows{guided} + {res['solve_rows']} worked solutions; held-out "
          f"balanced accuracy {b:.1%} -> {a:.1%}{rounds}")
    if a < s.check_target:
        print(f"worked-check warm-up: WARNING held-out balanced accuracy {a:.1%} is below sft.check_target="
              f"{s.check_target:.1%} after {res['rounds']} rounds (sft.check_rounds); RL starts from it anyway")
    return res


def run_own_attempt_warmup(rc: RunConfig, model, tokenizer, task: TaskData, workdir: str, mesh=None) -> dict:
    """After the SFT warm-up: sample `sft.own_attempt_samples` attempts on each of the first
    `sft.own_attempt_questions` warm-up questions, build critique / correction rows from them
    (`data.testbed.own_attempt_rows`), and train `sft.own_attempt_steps` SFT steps on those rows mixed with
    worked solutions. Logs to logs_own_attempts/; -> what it built and how long it took."""
    import jax

    from jaxrl_reason.train.trainer import sft_train
    from jaxrl_reason.train.verify_warmup import sample_labelled_solutions

    s = rc.sft
    t = time.time()
    questions = list(task.train[:s.own_attempt_questions])
    _, texts, labels = sample_labelled_solutions(
        model, tokenizer, questions, task.reward_fn, samples_per_question=s.own_attempt_samples,
        max_new_tokens=rc.rl.max_new_tokens, temperature=rc.rl.temperature,
        key=jax.random.fold_in(jax.random.PRNGKey(rc.setup_seed), 0x0A77), prompt_fn=task.prompt_fn, mesh=mesh)
    attempts = list(zip([e for e in questions for _ in range(s.own_attempt_samples)], texts))
    rows = own_attempt_rows(task_of(rc.data.source), attempts, seed=rc.setup_seed, keep_share=s.own_attempt_keep_share,
                            guided_layout=rc.data.guided_layout, critique_format=rc.data.critique_format,
                            correction_format=rc.data.correction_format, prompt_wording=rc.data.prompt_wording,
                            **own_attempt_formats(rc))
    if not rows:
        raise ValueError(f"own-attempt warm-up: the policy's {len(texts)} attempts gave no row (all right, or no "
                         "critiquable error); sample more questions (sft.own_attempt_questions) or set "
                         "sft.own_attempt_steps=0")
    solves = list(task.train[:s.examples])
    n_solve = min(len(solves), int(round(s.own_attempt_solve_share * len(rows))))
    writer = _writer(workdir, "logs_own_attempts")
    sft_train(model, tokenizer, rows + solves[:n_solve], steps=s.own_attempt_steps, batch_size=s.batch_size,
              lr=s.own_attempt_lr, warmup_steps=s.warmup_steps, seed=rc.setup_seed + 1, writer=writer,
              progress=rc.rl.progress, mesh=mesh, pack=s.pack, **stage_checkpoints(rc, workdir, "own_attempts"),
              prompt_fn=whole_turn_prompt_fn(rows, task.prompt_fn))
    writer.close()
    formats = [r.meta["format"] for r in rows]
    report = {"attempts": len(texts), "right_frac": float(labels.mean()), "correct_rows": formats.count("correct"),
              "keep_rows": sum(bool(r.meta.get("source_right")) for r in rows),
              "critique_rows": formats.count("critique"), "guided_rows": formats.count("guided"),
              "solve_rows": n_solve, "seconds": time.time() - t}
    print(f"own-attempt warm-up: {len(texts)} attempts ({report['right_frac']:.1%} right) -> "
          f"{report['correct_rows']} correction + {report['critique_rows']} critique + {report['guided_rows']} guided "
          f"rows, {n_solve} worked solutions, {s.own_attempt_steps} steps")
    return report


SFT_ONLY = "sft_only_model"  # <workdir>/ name of the SFT warm-up's model when stages follow it


def warmed_up_policy(rc: RunConfig, tokenizer, task: TaskData, workdir: str, mesh=None):
    """-> (the policy RL starts from, what its warm-ups report). With `sft.steps` > 0 the warmed-up model is kept
    in <workdir>/sft_model and reused from there by a later run (nothing is reported then); when stages follow
    the SFT (own-attempt, worked-check, verification warm-ups), the SFT alone is also kept, in
    <workdir>/sft_only_model (SFT_ONLY), and a run stopped during those stages starts them again from it, each
    stage resuming from its last checkpoint (`sft.checkpoint_every`; removed once sft_model is saved)."""
    sft_dir, sft_only = os.path.join(workdir, "sft_model"), os.path.join(workdir, SFT_ONLY)
    if rc.sft.steps > 0 and os.path.exists(os.path.join(sft_dir, "config.json")):
        return load_hf(sft_dir, rc.model, mesh), {}
    stages = max(rc.sft.own_attempt_steps, rc.sft.check_steps, rc.sft.verify_steps) > 0
    if rc.sft.steps > 0 and stages and os.path.exists(os.path.join(sft_only, "config.json")):
        model, report = load_hf(sft_only, rc.model, mesh), {"sft_resumed_from": sft_only}  # float32: exact
    else:
        model = build_model(rc, tokenizer, mesh)
        if rc.sft.steps <= 0:
            return model, {}
        report = {"sft_seconds": run_sft(rc, model, tokenizer, task, workdir, mesh)}
        if stages:  # the SFT alone, for a baseline that shares it without the stages after (a plain GRPO arm)
            save_hf(model, sft_only)
    for stage in stage_order(rc):
        steps, report_key, run_stage = STAGES[stage]
        if getattr(rc.sft, steps) > 0:
            report[report_key] = run_stage(rc, model, tokenizer, task, workdir, mesh)
    save_hf(model, sft_dir)
    from jaxrl_reason.parallel.mesh import is_main_process

    if is_main_process():
        shutil.rmtree(os.path.join(workdir, WARMUP_CHECKPOINTS), ignore_errors=True)
    return model, report


# stage name -> (its steps knob in `sft`, its report key, what runs it)
STAGES = {"own_attempts": ("own_attempt_steps", "own_attempts", run_own_attempt_warmup),
          "check": ("check_steps", "check_warmup", run_check_warmup),
          "verify": ("verify_steps", "verify_warmup", run_verify_warmup)}


def stage_order(rc: RunConfig) -> list:
    """`sft.stage_order` as a list of stage names; refuses an unknown, missing or repeated one."""
    names = [n.strip() for n in rc.sft.stage_order.split(",") if n.strip()]
    if sorted(names) != sorted(STAGES):
        raise ValueError(f"config sft.stage_order={rc.sft.stage_order!r}: name each of {', '.join(STAGES)} once, "
                         "in the order they run (e.g. 'verify,check,own_attempts')")
    return names


def without_verify_warmup(rc: RunConfig) -> RunConfig:
    """The same run with the verification and worked-check warm-ups off."""
    return dataclasses.replace(rc, sft=dataclasses.replace(rc.sft, verify_steps=0, check_steps=0))
