"""The typed store documents (awm_resources.documents) fit every file the writers really produce, and give
them back byte for byte: the imported corpus (generated/ and awm1k-sample/) and the synthesized demo store."""

import json
from pathlib import Path

import pytest

from awm_resources import documents as D


def _documents(root: Path) -> list[tuple[Path, type[D.Document]]]:
    """Every typed document of a store: catalog.json and each scenario folder's files (dot folders are an
    import's staging and replaced copies)."""
    found = [(root / D.CATALOG_FILE, D.Catalog)] if (root / D.CATALOG_FILE).is_file() else []
    for folder in sorted((root / "scenarios").iterdir()):
        if folder.name.startswith("."):
            continue
        for path in sorted(folder.rglob("*.json")):
            model = D.document_model(path.relative_to(folder).as_posix())
            if model is not None:
                found.append((path, model))
    return found


def _assert_round_trip(root: Path) -> dict[str, int]:
    """Each document parses, and dumping it gives the file's JSON again (keys, order, int vs float)."""
    counts: dict[str, int] = {}
    for path, model in _documents(root):
        original = json.loads(path.read_bytes())
        doc = D.read(model, path)
        assert json.dumps(D.dump(doc), ensure_ascii=False) == json.dumps(original, ensure_ascii=False), path
        counts[model.__name__] = counts.get(model.__name__, 0) + 1
        if model is D.VerifiersFile:  # one way to find the verifier functions: the import's and synthesis' agree
            assert all(v.functions == D.verifier_functions(v.code) for v in doc.verifiers), path
    return counts


def test_imported_corpus_documents(corpus_store):
    counts = _assert_round_trip(corpus_store.root)
    assert {"Scenario", "TaskList", "VerifiersFile", "StageStatus"} <= set(counts), counts
    assert corpus_store.scenario("gofundme").source == "imported" and corpus_store.tasks("gofundme").tasks


def test_synthesized_store_documents(demo_pristine):
    root = Path(demo_pristine)
    counts = _assert_round_trip(root)
    assert {"Catalog", "Scenario", "TaskList", "VerifiersFile", "StageStatus", "AttemptRecord",
            "QualityResult"} <= set(counts), counts
    from awm_resources.store import ArtifactStore

    store = ArtifactStore(root)
    catalog = store.catalog()
    assert catalog is not None and catalog.ready()
    entry = catalog.ready()[0]
    assert store.status(entry.name, "tasks").metric("tasks") == entry.tasks == len(store.tasks(entry.name).tasks)


def test_a_malformed_document_names_its_file_and_field(tmp_path):
    from awm_resources.store import ArtifactStore

    store = ArtifactStore(tmp_path)
    store.write_json("shop", D.TASKS_FILE, {"tasks": "buy a hat"})
    with pytest.raises(D.DocumentError, match=r"shop/tasks\.json is not a valid TaskList document: tasks: "):
        store.tasks("shop")
    with pytest.raises(FileNotFoundError, match="scenario 'shop' has no verifiers.json"):
        store.verifiers("shop")
    assert store.catalog() is None


def test_status_and_attempt_writers_keep_their_bytes_and_refuse_wrong_types(tmp_path):
    """The store writes status and attempt files through their models: the same JSON as the plain dicts gave
    (keys in the writer's order, extra metadata kept), and a wrong type is refused before anything is written."""
    from awm_resources.store import ArtifactStore

    store = ArtifactStore(tmp_path)
    status = {"source": "synthesized", "attempts": 2, "error_rate": 0, "valid": True, "tables": 7, "note": "é"}
    store.write_stage_status("shop", "db_schema", status)
    path = store.path("shop", "status/db_schema.json")
    written = json.loads(path.read_bytes())
    plain = {**status, "stage": "db_schema", "written_at": written["written_at"]}
    assert path.read_text(encoding="utf-8") == json.dumps(plain, indent=2, ensure_ascii=False) + "\n"
    assert store.status("shop", "db_schema").metric("tables") == 7
    record = {"passed": False, "error_rate": 0.5, "errors": {"task_1": ["vacuous"]}, "metrics": {"verifiers": 1},
              "artifact": {"verifiers": []}, "usage": {"cost_usd": 0.01}, "elapsed_s": 1.5}
    attempt = store.record_attempt("shop", "verifiers", 1, record)
    plain = {**record, "attempt": 1, "stage": "verifiers", "recorded_at": json.loads(attempt.read_bytes())["recorded_at"]}
    assert attempt.read_text(encoding="utf-8") == json.dumps(plain, indent=2, ensure_ascii=False) + "\n"
    with pytest.raises(D.DocumentError, match=r"status/tasks\.json is not a valid StageStatus document: valid: "):
        store.write_stage_status("shop", "tasks", {"valid": "yes"})
    assert not store.has("shop", "status/tasks.json")
