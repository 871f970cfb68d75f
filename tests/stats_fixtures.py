"""Planted judgments and calibrations written from the input contracts (not from the judge's code)."""

from __future__ import annotations

import numpy as np

from reappreg.settings.stats import StatsSettings
from reappreg.stats import ReferenceBar, TrustPolicy
from reappreg.evidence.reference import DecisionFloors, JudgeIdentity

# A local judge: its identity is the md5 of its weights (reappreg.lm.model_fingerprint), pinned with the bar.
JUDGE, FINGERPRINT = "fake-judge", "md5:0123456789abcdef0123456789abcdef.dir"
REFERENCE = ReferenceBar(bar=0.608, opponent="gpt-4-0314", judge=JUDGE,
                         judge_identity=JudgeIdentity(weights_md5=FINGERPRINT), source="reference model card",
                         decision=DecisionFloors(confidence=0.95, min_n_confirm=240, min_agreement=0.65,
                                                 calibration_min_pairs=16, max_position_bias=0.2,
                                                 max_unparseable_rate=0.05))
TRUSTED = {
    "judge_model": JUDGE, "judge_fingerprint": FINGERPRINT, "n_pairs": 240, "agreement": 0.9,
    "agreement_low": 0.87, "agreement_high": 0.93, "position_bias_A": 0.04, "position_bias_B": 0.03,
    "order_consistency": 0.93, "unparseable_rate": 0.0, "min_agreement": 0.65, "min_pairs": 200, "trusted": True,
}
POLICY = TrustPolicy(max_position_bias=0.2, max_unparseable_rate=0.05, min_agreement_floor=0.65, min_pairs_floor=None)
FAST = StatsSettings(bootstrap_iterations=500, lc_bootstrap_iterations=60, seed=3)
ORDERS = ("policy_first", "policy_second")


def verdict_for(order: str, score: float | None) -> str:
    if score is None:
        return "unparseable"
    if score == 0.5:
        return "tie"
    mine = "A" if order == "policy_first" else "B"
    return mine if score == 1.0 else ("B" if mine == "A" else "A")


def order_row(*, contest: str, generation: str, vignette: str, answer: str, order: str, score: float | None,
              opponent: str = "gpt-4-0314", selection: str = "none", eval_k: int = 0, seed: int = 0,
              policy_chars: int = 120, opponent_chars: int = 120, probs: tuple | None = None,
              verdict: str | None = None) -> dict:
    verdict = verdict or verdict_for(order, score)
    if verdict in ("A", "B", "tie") and score is None:
        mine = "A" if order == "policy_first" else "B"
        score = 0.5 if verdict == "tie" else float(verdict == mine)
    p_a, p_b, p_tie = probs if probs is not None else (None, None, None)
    return {
        "contest_id": contest, "generation_id": generation, "vignette_id": vignette, "eval_k": eval_k,
        "opponent_source": opponent, "opponent_answer_id": answer, "order": order,
        "raw_output": verdict, "verdict": verdict, "policy_score": score, "judge_model": JUDGE,
        "selection": selection, "p_a": p_a, "p_b": p_b, "p_tie": p_tie,
        "verdict_method": "logprob" if probs is not None else "guided", "judge_fingerprint": FINGERPRINT,
        "sampling_seed": seed, "policy_chars": policy_chars, "opponent_chars": opponent_chars,
    }


def planted(rates: dict[str, float] | list[float], *, generations: int = 20, answers: int = 2, seed: int = 0,
            selection: str = "none", opponent: str = "gpt-4-0314", split_share: float = 0.0,
            seed_offset: int = 0, id_prefix: str = "") -> list[dict]:
    """Both orders of generations x answers contests per vignette.

    In each vignette a share ``rate`` of the contests is won in both orders (spread evenly over
    generations, deterministically), a share ``split_share`` of the rest splits its orders.
    """
    if isinstance(rates, list):
        rates = {f"v{g}": r for g, r in enumerate(rates)}
    rng = np.random.default_rng(seed)
    rows = []
    for vi, (vignette, rate) in enumerate(rates.items()):
        n = generations * answers
        wins = round(rate * n)
        order = rng.permutation(n)
        outcome = np.where(order < wins, 1.0, 0.0)
        losers = np.flatnonzero(outcome == 0.0)
        n_split = round(split_share * len(losers))
        for j in range(n):
            g, a = divmod(j, answers)
            gen = f"{id_prefix}{selection}-{vignette}-g{g}"
            contest = f"{id_prefix}{selection}-{opponent}-{vignette}-{j}"
            answer = f"{opponent}-{vignette}-a{(g + a) % 10}"
            sampling_seed = seed_offset + 1000 * vi + g
            for order_name in ORDERS:
                score = float(outcome[j])
                if j in losers[:n_split] and order_name == "policy_first":
                    score = 1.0
                rows.append(order_row(contest=contest, generation=gen, vignette=vignette, answer=answer,
                                      order=order_name, score=score, opponent=opponent, selection=selection,
                                      eval_k=g % 3, seed=sampling_seed))
    return rows


def claim(report: dict, claim_id: str) -> dict:
    return next(c for c in report["claims"] if c["claim_id"] == claim_id)


# ----------------------------------------------------------------------------- an honest upstream


def honest_generate(generations: int, seed: int = 0):
    """The generate settings whose sampling plan ``honest_upstream`` holds: ``generations`` evals
    of one sample per vignette."""
    from reappreg.settings.generate import GenerateSettings

    return GenerateSettings(evals=generations, samples_per_vignette=1, seed=seed)


# The policy model the honest upstream's generations came from (generate records its folder's md5).
POLICY_MD5 = "md5:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.dir"


def honest_upstream(rates: list[float], *, generations: int = 8, answers_per_vignette: int = 4,
                    opponents: tuple[str, ...] = ("gpt-4-0314", "claude-3-opus"), answers_per_generation: int = 2,
                    seed: int = 0, model_md5: str | None = POLICY_MD5, generate=None) -> dict:
    """Vignettes, held-out answers and generations as the split and generate stages write them,
    and the judged orders of exactly the contests the judge would plan (its own build_contests),
    with a share ``rates[v]`` of vignette v's contests won in both orders, the rest lost.
    Verdicts come from label probabilities whose argmax they are (method logprob). The
    generations are the sampling plan of ``generate`` (default ``honest_generate(generations, seed)``)
    over the vignettes it selects, each naming the policy model ``model_md5``."""
    from reappreg.eval.plan import plan_samples, select_vignettes
    from reappreg.judge.contests import build_contests

    generate = generate or honest_generate(generations, seed)

    rng = np.random.default_rng(seed)
    vignettes = [{"vignette_id": f"v{i}", "title": f"t{i}", "scenario": f"scenario {i}"} for i in range(len(rates))]
    answers = [{"answer_id": f"{src}-v{i}-{j:02d}", "vignette_id": f"v{i}", "source": src,
                "text": f"{src} answer {j} for vignette {i}" + "." * int(rng.integers(0, 40))}
               for src in opponents for i in range(len(rates)) for j in range(answers_per_vignette)]
    plan = plan_samples([v["vignette_id"] for v in select_vignettes(vignettes, generate.vignettes)], generate)
    gens = [{"generation_id": s.generation_id, "pool_id": s.pool_id, "vignette_id": s.vignette_id, "eval_k": s.eval_k,
             "sample_index": s.sample_index, "candidate_index": s.candidate_index, "selection": "none",
             "selected": True, "scenario": f"scenario {s.vignette_id[1:]}",
             "answer": "you " + "x" * int(rng.integers(40, 200)), "sampling_seed": s.seed,
             **({"model_md5": model_md5} if model_md5 is not None else {})}
            for s in sorted(plan, key=lambda s: (int(s.vignette_id[1:]), s.eval_k))]
    contests = build_contests(gens, answers, list(opponents), answers_per_generation)
    rows = []
    by_vignette: dict[str, list] = {}
    for c in contests:
        by_vignette.setdefault(c.vignette_id, []).append(c)
    for vid, group in by_vignette.items():
        rate = rates[int(vid[1:])]
        wins = set(rng.permutation(len(group))[: round(rate * len(group))].tolist())
        for j, c in enumerate(group):
            for order in ORDERS:
                mine = "A" if order == "policy_first" else "B"
                verdict = mine if j in wins else ("B" if mine == "A" else "A")
                p_win = round(0.6 + 0.3 * float(rng.random()), 6)  # a judge's own, unsaturated probabilities
                p_a, p_b = (p_win, round(0.95 - p_win, 6)) if verdict == "A" else (round(0.95 - p_win, 6), p_win)
                rows.append({
                    "contest_id": c.contest_id, "generation_id": c.generation_id, "vignette_id": c.vignette_id,
                    "eval_k": c.eval_k, "sampling_seed": c.sampling_seed, "opponent_source": c.opponent_source,
                    "opponent_answer_id": c.opponent_answer_id, "order": order,
                    "raw_output": "top_logprobs: ...", "verdict": verdict, "verdict_method": "logprob",
                    "p_a": p_a, "p_b": p_b, "p_tie": 0.05, "policy_score": float(verdict == mine),
                    "policy_chars": len(c.policy_answer), "opponent_chars": len(c.opponent_answer),
                    "judge_model": JUDGE, "judge_fingerprint": FINGERPRINT, "selection": c.selection,
                })
    return {"vignettes": vignettes, "answers": answers, "generations": gens, "judgments": rows,
            "opponents": list(opponents), "answers_per_generation": answers_per_generation,
            "generate": generate}


def write_upstream(upstream: dict, folder) -> dict:
    """Write the upstream files; returns {name: path}."""
    import json
    from pathlib import Path

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name in ("vignettes", "answers", "generations", "judgments"):
        path = folder / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in upstream[name]), encoding="utf-8")
        paths[name] = path
    return paths


WORDS = ("quiet morning letter window garden river patience friend evening promise harbour lantern "
         "journey ladder meadow thunder candle bridge orchard compass blanket kettle pebble anchor "
         "whisper sparrow canvas ribbon valley breeze mirror shelter pocket button violin marble "
         "summit forest cradle saddle fabric copper island puzzle timber velvet voyage wander "
         "gather borrow listen settle gentle steady honest hollow narrow simple bright careful").split()


def answer_text(generation_id: str, sentences: int = 3, words: int = 9) -> str:
    """An answer of its own for ``generation_id``: ``sentences`` sentences of words drawn, by a seed from
    the id, from a vocabulary of 72, so two ids share almost no word sequence (what honest, distinct
    answers look like to the guard's near-duplicate detectors)."""
    import hashlib
    import random

    rng = random.Random(int.from_bytes(hashlib.sha256(generation_id.encode()).digest()[:8], "big"))
    return " ".join(" ".join(rng.choice(WORDS) for _ in range(words)).capitalize() + "."
                    for _ in range(sentences))


def bind_to_upstream(rows: list[dict], folder, *, texts: dict[str, str] | None = None) -> tuple[list[dict], "object", int]:
    """Write the upstream files whose plan holds exactly the contests of ``rows`` (a vignette
    list, held-out answers, the generations with ``texts`` as their answers), and return the
    rows relabelled to the planned contest and answer ids and lengths, with the
    ``DesignSources`` that bind them and the answers per generation. Planted outcomes stay as they were: only labels the
    design derives are rewritten, as an honest judge stage would have written them."""
    import json
    from pathlib import Path

    from reappreg.judge.contests import build_contests
    from reappreg.stats.design import DesignSources

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    first: dict[str, dict] = {}
    contests_of: dict[tuple[str, str], list[str]] = {}
    for r in rows:
        first.setdefault(r["generation_id"], r)
        seen = contests_of.setdefault((r["generation_id"], r["opponent_source"]), [])
        if r["contest_id"] not in seen:
            seen.append(r["contest_id"])
    per_generation = {len(v) for v in contests_of.values()}
    assert len(per_generation) == 1, f"planted rows pair generations with unequal numbers of answers: {per_generation}"
    answers_per_generation = per_generation.pop()
    opponents = sorted({r["opponent_source"] for r in rows})
    vignettes = sorted({r["vignette_id"] for r in rows})
    answers = [{"answer_id": f"{src}-{vid}-a{j:02d}", "vignette_id": vid, "source": src,
                "text": f"{src} on {vid}, answer {j}: a reading of its own."}
               for src in opponents for vid in vignettes for j in range(max(10, answers_per_generation))]
    gens = [{"generation_id": gid, "vignette_id": r["vignette_id"], "eval_k": r["eval_k"], "selection": r["selection"],
             "selected": True, "scenario": f"scenario {r['vignette_id']}", "sampling_seed": r["sampling_seed"],
             "answer": (texts or {}).get(gid, answer_text(gid))} for gid, r in first.items()]
    planned: dict[tuple[str, str], list] = {}
    for c in build_contests(gens, answers, opponents, answers_per_generation):
        planned.setdefault((c.generation_id, c.opponent_source), []).append(c)
    relabel = {}
    for key, ids in contests_of.items():
        for cid, contest in zip(ids, planned[key]):
            relabel[(key, cid)] = contest
    bound = []
    for r in rows:
        c = relabel[((r["generation_id"], r["opponent_source"]), r["contest_id"])]
        bound.append({**r, "contest_id": c.contest_id, "opponent_answer_id": c.opponent_answer_id,
                      "policy_chars": len(c.policy_answer), "opponent_chars": len(c.opponent_answer)})
    for name, records in (("vignettes", [{"vignette_id": v, "scenario": f"scenario {v}"} for v in vignettes]),
                          ("answers", answers), ("generations", gens)):
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in records), encoding="utf-8")
    design = DesignSources(folder / "generations.jsonl", folder / "answers.jsonl", folder / "vignettes.jsonl",
                           opponents=tuple(opponents))
    return bound, design, answers_per_generation


def sampled_upstream(folder, generate, judge, rates: dict[str, float], *, seed: int = 0, id_prefix: str = "") -> dict:
    """Vignettes, held-out answers, and per condition in ``rates`` the generations of the
    sampling plan of ``generate`` (``eval.plan``) with judged orders of the contests ``judge``
    plans, a share ``rate`` won in both orders; written where the pipeline lays them out
    (``policy/`` and ``conditions/<name>/``). Returns the paths."""
    import json
    from pathlib import Path

    from reappreg.eval.plan import plan_samples, select_vignettes
    from reappreg.judge.contests import build_contests

    folder = Path(folder)
    rng = np.random.default_rng(seed)
    vignettes = [{"vignette_id": f"v{i}", "title": f"t{i}", "scenario": f"scenario {i}"} for i in range(6)]
    answers = [{"answer_id": f"{src}-v{i}-{j:02d}", "vignette_id": f"v{i}", "source": src,
                "text": f"{src} answer {j} for vignette {i}"} for src in judge.opponents for i in range(6) for j in range(4)]

    def write(path: Path, records: list[dict]) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
        return path

    paths = {"vignettes": write(folder / "vignettes.jsonl", vignettes), "answers": write(folder / "answers.jsonl", answers)}
    for name, rate in rates.items():
        where = folder / "policy" if name == "policy" else folder / "conditions" / name
        gens = [{"generation_id": s.generation_id, "pool_id": s.pool_id, "vignette_id": s.vignette_id,
                 "eval_k": s.eval_k, "sample_index": s.sample_index, "candidate_index": s.candidate_index,
                 "selection": s.selection, "selected": True, "sampling_seed": s.seed, "seed": s.seed,
                 "scenario": f"scenario {s.vignette_id[1:]}", "answer": f"{name} answer of {s.generation_id}"}
                for s in plan_samples([v["vignette_id"] for v in select_vignettes(vignettes, generate.vignettes)],
                                      generate, id_prefix)]
        rows = []
        for c in build_contests(gens, answers, judge.opponents, judge.answers_per_generation):
            score = float(rng.random() < rate)
            rows += [order_row(contest=c.contest_id, generation=c.generation_id, vignette=c.vignette_id,
                               answer=c.opponent_answer_id, order=o, score=score, opponent=c.opponent_source,
                               eval_k=c.eval_k, seed=c.sampling_seed, policy_chars=len(c.policy_answer),
                               opponent_chars=len(c.opponent_answer)) for o in ORDERS]
        paths[f"{name}/generations"] = write(where / "generations.jsonl", gens)
        paths[f"{name}/judgments"] = write(where / "judgments.jsonl", rows)
    return paths
