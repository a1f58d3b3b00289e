"""Scenario generation as the paper runs it: rounds until the batch's target is accepted, the seeds in the
dedup pool, categories from the fixed list with a cap each, and an API embedding model through litellm."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from awm_assets.synthesis.config import SynthesisConfig
from awm_assets.synthesis.scenarios import CATEGORIES, generate_scenarios
from awm_assets.synthesis.seeds import read_seed_batch
from awm_resources.embedder import ApiEmbedder, Embedder
from awm_resources.llm import LLMClient
from awm_resources.store import ArtifactStore

SEEDS = [{"name": "Zocdoc", "description": "Doctor search and appointment booking with reviews and insurance."}]


def _cand(name: str, description: str, category: str = "healthcare") -> dict:
    return {"name": name, "description": description, "category": category}


ROUNDS = {
    1: [_cand("Clinic Appointment Book", "A clinic front desk books, reschedules and cancels patient appointments "
                                          "with doctors, rooms and insurance plans, and keeps visit notes."),
        # Restates the seed itself: a copy, not a new environment.
        _cand("Zocdoc", "Doctor search and appointment booking with reviews and insurance."),
        _cand("Pharmacy Refills", "A pharmacy portal where patients request prescription refills, track order "
                                  "status and manage pickup locations and insurance cards.")],
    2: [_cand("Dental Recall Planner", "A dental practice schedules six-month recall visits, sends reminders and "
                                       "records treatments per tooth for each patient."),
        _cand("Team Expense Reports", "Employees file expense reports with receipts, managers approve or reject "
                                      "them and finance reimburses approved reports.", "finance and banking")],
}


def _replay_dir(tmp_path: Path, batch: str, category_for: dict[str, str] | None = None) -> Path:
    folder = tmp_path / "replay" / f"_batch_{batch}"
    folder.mkdir(parents=True)
    for r, cands in ROUNDS.items():
        (folder / f"scenarios.{r}.md").write_text(json.dumps({"scenarios": cands}))
        verdicts = [{"name": c["name"], "suitable": True, "reason": "records", "category":
                     (category_for or {}).get(c["name"], c["category"])} for c in cands]
        (folder / f"classify.{r}.md").write_text(json.dumps({"verdicts": verdicts}))
    return folder.parent


@pytest.fixture()
def batch(tmp_path):
    path = tmp_path / "clinics.jsonl"
    path.write_text("\n".join(json.dumps(s) for s in SEEDS) + "\n")
    return read_seed_batch(path)


def test_rounds_until_the_target_seeds_in_the_pool_and_categories(tmp_path, batch):
    llm = LLMClient(replay_dir=_replay_dir(tmp_path, batch.key, {"Team Expense Reports": "no such category"}))
    result = generate_scenarios(batch, ArtifactStore(tmp_path / "store"), llm, Embedder(),
                                SynthesisConfig(target_scenarios=3, max_generation_rounds=5, dedup_threshold=0.85))
    decisions = {d.name: d for d in result.decisions}
    assert len(result.decisions) == 5 and len(llm.ledger) == 4  # two rounds of generation + classification
    assert decisions["Zocdoc"].status == "rejected_duplicate" and "'seed Zocdoc'" in decisions["Zocdoc"].reason
    assert [d.name for d in result.accepted()] == ["Clinic Appointment Book", "Pharmacy Refills",
                                                    "Dental Recall Planner", "Team Expense Reports"]
    assert decisions["Clinic Appointment Book"].category == "healthcare" and "healthcare" in CATEGORIES
    assert decisions["Team Expense Reports"].category == "other"  # not on the fixed list


def test_one_round_without_a_target_and_the_category_cap(tmp_path, batch):
    llm = LLMClient(replay_dir=_replay_dir(tmp_path, batch.key))
    result = generate_scenarios(batch, ArtifactStore(tmp_path / "store"), llm, Embedder(),
                                SynthesisConfig(max_per_category=1))
    statuses = {d.name: d.status for d in result.decisions}
    assert len(llm.ledger) == 2
    assert statuses == {"Clinic Appointment Book": "accepted", "Zocdoc": "rejected_duplicate",
                        "Pharmacy Refills": "capped"}


def test_an_api_embedding_model_through_litellm(tmp_path, batch, llm_server):
    """The paper embeds with an API model; here an OpenAI-protocol server on loopback answers."""
    embedder = ApiEmbedder("openai/text-embedding-3-large", api_base=f"{llm_server.url}/v1", api_key="sk-test")
    vecs = embedder.embed(["clinic appointments", "clinic appointments", "expense reports"])
    assert vecs.shape == (3, 64) and abs(float(vecs[0] @ vecs[1]) - 1.0) < 1e-5 and float(vecs[0] @ vecs[2]) < 0.5
    llm = LLMClient(replay_dir=_replay_dir(tmp_path, batch.key))
    result = generate_scenarios(batch, ArtifactStore(tmp_path / "store"), llm, embedder,
                                SynthesisConfig(dedup_threshold=0.99))
    assert {d.name: d.status for d in result.decisions}["Zocdoc"] == "rejected_duplicate"
    assert any(r.path == "/v1/embeddings" and r.body["model"] == "text-embedding-3-large" for r in llm_server.requests)


def test_a_cached_api_embedding_model_is_asked_only_for_new_texts(tmp_path, llm_server):
    """What a paid API model saves with the embedding cache: the second batch's known texts are not sent again."""
    from awm_resources.embedder import CachedEmbedder

    def sent() -> list[str]:
        return [t for r in llm_server.requests if r.path == "/v1/embeddings" for t in r.body["input"]]

    def cached() -> CachedEmbedder:
        return CachedEmbedder(ApiEmbedder("openai/text-embedding-3-large", api_base=f"{llm_server.url}/v1",
                                          api_key="sk-test"), tmp_path / "embedding_cache.sqlite")

    first = cached().embed(["clinic appointments", "expense reports"])
    assert sent() == ["clinic appointments", "expense reports"]
    again = cached().embed(["expense reports", "team calendar", "clinic appointments"])
    assert sent() == ["clinic appointments", "expense reports", "team calendar"]  # only the new text went out
    assert (again[0] == first[1]).all() and (again[2] == first[0]).all() and again.shape == (3, 64)
