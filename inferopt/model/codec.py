"""Text <-> token ids for a served model, from its own `tokenizer.json` (the `tokenizers` library: no torch).

Used where a run asks a model something in words and reads its answer (a session's tool-call turn), while the rest
of the load stays token ids. `codec_for(model_dir)` returns a `TextCodec` or the reason there is none; `encode`
adds no special tokens (the text sits inside a longer prompt), `answer` cuts the ids at the first EOS and decodes
them without special tokens.

Deliberately not here: which engines have a local model (`Capabilities.model`) or what is asked (`measure`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class TextCodec:
    tokenizer: Any  # a `tokenizers.Tokenizer`
    eos_token_id: int | None

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def answer(self, ids: list[int]) -> str:
        """The text of output ids up to (not including) the first EOS."""
        if self.eos_token_id is not None and self.eos_token_id in ids:
            ids = ids[: ids.index(self.eos_token_id)]
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=True))


def _eos_of(model_dir: Path) -> int | None:
    for name in ("generation_config.json", "config.json"):
        path = model_dir / name
        if path.is_file():
            eos = json.loads(path.read_text()).get("eos_token_id")
            if isinstance(eos, list) and eos:
                return int(eos[0])
            if isinstance(eos, int):
                return eos
    return None


def codec_for(model_dir: str | Path, tokenizer_dir: str | Path | None = None) -> tuple[TextCodec | None, str]:
    """(the model's codec, "") or (None, why not: no tokenizer.json). `tokenizer_dir`: the model spec's own
    tokenizer when it names one (EOS is still the model's)."""
    tok_dir = Path(tokenizer_dir or model_dir)
    path = tok_dir / "tokenizer.json"
    if not path.is_file():
        return None, f"no tokenizer.json in {tok_dir}: the answer cannot be read as text"
    from tokenizers import Tokenizer  # lazy: only runs that ask a model in words need a tokenizer

    eos = _eos_of(Path(model_dir))
    return TextCodec(Tokenizer.from_file(str(path)), eos if eos is not None else _eos_of(tok_dir)), ""
