"""Whole-page reading with transformers' page-reading VLMs (GOT-OCR2, Qwen2-VL, Florence-2
`<OCR>`) from a local folder: `pages = document.read("scan.pdf", model="/models/got-ocr2")`.

Each page goes to the model whole (its processor resizes it); the answer is decoded through
suite's loop (suite/models/vlm/ adapters) with `ar` or any exact chain decoder: `ngram` (page text
repeats: words, numbers, table cells), `lookahead`, `jacobi`, `speculative` (draft='self:N', the
first N text layers, or draft_model= another VLM of the family). Each equals the family's greedy
`generate` token for token. `document.read` turns each answer into a `reader.Page` whose lines are
the answer's lines, each boxed by the whole page (the model reads the page, not located lines).

Region-parallel reading (`document.read(path, model=folder, regions=True)`): the page's text
regions (the line detector's boxes) are cropped and read as one ragged batch (`regions`, at most
REGION_BATCH crops a batch), each crop with the family's own reading prompt, so one forward
advances every region of the page. Each crop is its own image, hence its own prefix: no image
prefix (no K/V) is shared across rows, since these families put the image into the prompt; the
prompt text around it (GOT-OCR2's and Qwen2-VL's chat turn) is the same in every row and is
recomputed per row. The parallelism is the batch.
Every decoder here equals `ar` on each crop, token for token, as on whole pages.
"""
from __future__ import annotations

import suite
from suite import DecodeStats
from suite.vlm import VLM, VLMResult, load_vlm

FAMILIES = ("got_ocr2", "qwen2_vl", "florence2")
MAX_NEW_TOKENS = 1024
REGION_BATCH = 16      # region crops per batch: a long page's memory stays bounded
READ_PROMPT = "Read all the text in the image."       # Qwen2-VL's instruction (a chat turn)


class HFPageReader:
    """A page-reading VLM: page images in, their text out (one ragged batch per call)."""

    def __init__(self, vlm: VLM, max_new_tokens: int = MAX_NEW_TOKENS):
        if vlm.family not in FAMILIES:
            raise ValueError(f"a {vlm.family!r} model does not read pages here; page-reading families: "
                             f"{', '.join(FAMILIES)} (or our own OCR: document.read(path))")
        self.vlm, self.family, self.max_new_tokens = vlm, vlm.family, max_new_tokens
        self.decoders = tuple(n for n in suite.list_decoders("document", chain=suite.TEXT_DECODERS)
                              if suite.decoder_entry(n).modalities == ("any",) and suite.decoder_entry(n).guarantee
                              != "lossy")

    def batch(self, images):
        """The processor batch of page images with the family's reading prompt."""
        if self.family == "got_ocr2":
            return self.vlm.processor(images=list(images), return_tensors="pt").to(self.vlm.device)
        if self.family == "florence2":
            return self.vlm.inputs(list(images), ["<OCR>"] * len(images))
        turn = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": READ_PROMPT}]}]
        text = self.vlm.processor.apply_chat_template(turn, add_generation_prompt=True)
        return self.vlm.inputs(list(images), [text] * len(images))

    def __call__(self, images, decoder="ar", **options):
        """Page images (PIL) -> suite.vlm.VLMResult: texts (special tokens dropped), tokens, stats."""
        if isinstance(decoder, str) and decoder not in self.decoders:
            raise ValueError(f"unknown decoder {decoder!r} for whole-page reading with {self.family}; use one of: "
                             f"{', '.join(self.decoders)}")
        batch = self.batch(images)
        res = self.vlm.generate(None, None, decoder=decoder, max_new_tokens=self.max_new_tokens, batch=batch, **options)
        res.texts = [t.strip() for t in self.vlm.tokenizer.batch_decode(res.tokens, skip_special_tokens=True)]
        return res

    def regions(self, crops, decoder="ar", batch: int = REGION_BATCH, **options) -> VLMResult:
        """The region crops of one page (reading order) -> one text per crop, `batch` crops per
        ragged batch (one batch for most pages); stats summed over the batches."""
        parts = [self(crops[i:i + batch], decoder=decoder, **options) for i in range(0, len(crops), batch)]
        return VLMResult([t for p in parts for t in p.texts], [t for p in parts for t in p.tokens],
                         DecodeStats.beside([p.stats for p in parts]), parts[0].settings if parts else {})

    def reference(self, images) -> list[list[int]]:
        """The family's own greedy generate, page by page (the tests' oracle)."""
        return [self.vlm.reference(None, None, self.max_new_tokens, batch=self.batch([img]))[0] for img in images]


def load_reader(model, max_new_tokens: int = MAX_NEW_TOKENS, device: str | None = None,
                generation: dict | None = None) -> HFPageReader:
    """A folder (or a loaded suite.vlm.VLM / HFPageReader) as a page reader."""
    if isinstance(model, HFPageReader):
        return model
    vlm = model if isinstance(model, VLM) else load_vlm(model, device=device, generation=generation)
    return HFPageReader(vlm, max_new_tokens)
