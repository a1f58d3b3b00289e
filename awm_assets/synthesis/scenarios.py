"""Scenario generation for a seed batch: self-instruct candidates, CRUD-suitability classifier,
embedding dedup against every kept scenario (all batches), and category caps."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from awm_resources.embedder import Embedder
from awm_resources.llm import CallTag, LLMClient, parse_model
from awm_resources.names import normalize_scenario_name
from awm_resources.store import ArtifactStore

from awm_assets.synthesis import prompts
from awm_assets.synthesis.models import ScenarioCandidates, SuitabilityVerdicts
from awm_assets.synthesis.seeds import SeedBatch


@dataclass
class GenerationSettings:
    candidates: int = 8
    dedup_threshold: float = 0.85
    max_per_category: int = 50


@dataclass
class Decision:
    name: str
    key: str
    description: str
    category: str
    status: str  # accepted | rejected_classifier | rejected_duplicate | capped
    reason: str = ""


@dataclass
class GenerationResult:
    decisions: list[Decision] = field(default_factory=list)

    def accepted(self) -> list[Decision]:
        return [d for d in self.decisions if d.status == "accepted"]

    def counts(self) -> dict[str, int]:
        c = Counter(d.status for d in self.decisions)
        return {"generated": len(self.decisions), "accepted": c["accepted"],
                "rejected_by_classifier": c["rejected_classifier"], "rejected_as_duplicate": c["rejected_duplicate"],
                "capped": c["capped"]}


def kept_scenarios(store: ArtifactStore) -> list[dict[str, Any]]:
    """Every scenario already in the store (all batches, imported ones included)."""
    out = []
    for key in store.list_scenarios():
        sc = store.read_json(key, "scenario.json")
        out.append({"key": key, "name": sc.get("name") or key, "description": sc.get("description") or "",
                    "category": sc.get("category") or "other"})
    return out


def generate_scenarios(batch: SeedBatch, store: ArtifactStore, llm: LLMClient, embedder: Embedder,
                       settings: GenerationSettings) -> GenerationResult:
    existing = kept_scenarios(store)
    tag = CallTag(stage="scenarios", scenario=f"_batch_{batch.key}")
    cands, _ = llm.chat_json(prompts.scenario_generation(list(batch.seeds), [e["name"] for e in existing],
                                                         settings.candidates), ScenarioCandidates, tag=tag)
    tag_cls = CallTag(stage="classify", scenario=f"_batch_{batch.key}")
    verdicts, _ = llm.chat_json(prompts.scenario_classification([c.model_dump() for c in cands.scenarios]),
                                SuitabilityVerdicts, tag=tag_cls)
    verdict_by_name = {v.name.strip().lower(): v for v in verdicts.verdicts}

    result = GenerationResult()
    kept_texts = [f"{e['name']}: {e['description']}" for e in existing]
    kept_keys = {e["key"] for e in existing}
    kept_vecs = embedder.embed(kept_texts) if kept_texts else np.zeros((0, 384), dtype=np.float32)
    categories = Counter(e["category"] for e in existing)
    for cand in cands.scenarios:
        key = normalize_scenario_name(cand.name)
        category = normalize_scenario_name(cand.category)
        d = Decision(cand.name.strip(), key, cand.description.strip(), category, "accepted")
        verdict = verdict_by_name.get(cand.name.strip().lower())
        if verdict is None or not verdict.suitable:
            d.status = "rejected_classifier"
            d.reason = verdict.reason if verdict else "the classifier gave no verdict for it"
        elif key in kept_keys:
            d.status, d.reason = "rejected_duplicate", f"a scenario with key {key!r} already exists"
        else:
            vec = embedder.embed([f"{cand.name}: {cand.description}"])
            sims = kept_vecs @ vec[0] if len(kept_vecs) else np.zeros(0)
            if len(sims) and float(sims.max()) >= settings.dedup_threshold:
                j = int(sims.argmax())
                d.status = "rejected_duplicate"
                d.reason = f"cosine {float(sims[j]):.3f} >= {settings.dedup_threshold} to {kept_texts[j].split(':')[0]!r}"
            elif categories[category] >= settings.max_per_category:
                d.status, d.reason = "capped", f"category {category!r} already has {categories[category]} scenarios"
            else:
                kept_vecs = np.vstack([kept_vecs, vec]) if len(kept_vecs) else vec
                kept_texts.append(f"{cand.name}: {cand.description}")
                kept_keys.add(key)
                categories[category] += 1
        result.decisions.append(d)
    return result


def register_accepted(result: GenerationResult, store: ArtifactStore, batch: SeedBatch) -> list[str]:
    """Write scenario.json for every accepted scenario; returns their keys."""
    keys = []
    for d in result.accepted():
        store.write_json(d.key, "scenario.json", {"name": d.name, "key": d.key, "description": d.description,
                                                  "category": d.category, "seed_batch": batch.key,
                                                  "source": "synthesized"})
        keys.append(d.key)
    return keys


def batch_record_path(store: ArtifactStore, batch_key: str):
    return store.root / "batches" / f"{batch_key}.json"


def record_batch(store: ArtifactStore, batch: SeedBatch, result: GenerationResult,
                 usage: dict[str, Any] | None = None) -> None:
    """Remember which file version a batch was generated from (so sensors do not generate it twice) and
    what generating it cost (synthesis statistics)."""
    from awm_resources.store import atomic_write_json

    atomic_write_json(batch_record_path(store, batch.key), {
        "batch": batch.key, "path": str(batch.path), "digest": batch.digest, "counts": result.counts(),
        "usage": usage or {}, "decisions": [vars(d) for d in result.decisions]})


def batch_already_generated(store: ArtifactStore, batch: SeedBatch) -> bool:
    import json

    path = batch_record_path(store, batch.key)
    return path.is_file() and json.loads(path.read_text(encoding="utf-8")).get("digest") == batch.digest
