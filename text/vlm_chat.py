"""Vision-language chat: what `text.load(folder)` returns for an image-text-to-text folder, over
suite.vlm's VLM front end."""
from __future__ import annotations

from dataclasses import dataclass

from suite.vlm import VLM
from suite.params import DEFAULT_MAX_NEW_TOKENS


@dataclass
class ChatResult:
    text: str
    tokens: list[int]
    stats: object


class VLMChat:
    """Vision-language chat over a loaded VLM (what `text.load(folder)` returns for an
    image-text-to-text folder): `chat.generate("What is here?", image=img, decoder="ngram")`."""

    def __init__(self, vlm: VLM, name: str = ""):
        self.vlm, self.name = vlm, name or vlm.folder
        self.decoders = tuple(n for n in ("ar", "jacobi", "sjd", "mc_sjd", "lookahead", "ngram", "speculative")
                              if vlm.spec.custom_mask or n != "lookahead")   # lookahead's tree drafts need it

    def prompt(self, text: str) -> str:
        """A chat family (the VLM family's `chat_template`, Qwen2-VL): its chat template over one image
        turn; the other families take the text as their prompt (PaliGemma, Florence-2 tasks, Kosmos-2, GOT-OCR2)."""
        if self.vlm.spec.chat_template:
            turn = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]
            return self.vlm.processor.apply_chat_template(turn, add_generation_prompt=True)
        return text

    def generate(self, prompt: str, image=None, decoder="ar", max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS, **options) -> ChatResult:
        if image is None:
            raise ValueError(f"{self.vlm.family} is a vision-language model: pass image= (a PIL image) with the prompt")
        res = self.vlm.generate([image], [self.prompt(prompt)], decoder=decoder, max_new_tokens=max_new_tokens, **options)
        text = self.vlm.tokenizer.decode(res.tokens[0], skip_special_tokens=True)
        return ChatResult(text, res.tokens[0], res.stats)
