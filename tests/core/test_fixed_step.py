"""The fixed step (suite.models.step): every decode step scores the same number of slots, so a token
scored at slot k gets bitwise the logits it gets at slot 0, and every lossless decoder gives `ar`'s tokens
bitwise, in float32 and in bfloat16, on three architectures (unsharpened random models: near ties are
common, so only bitwise-equal logits pass), with the per-width matmul forms the embedded model uses
(suite.models.linear_forms: without a fixed step, a one-token and an eight-token forward take different
forms, and in float32 no slot's logits match bitwise), each layer pinned to one form on the step, so a row's
logits are the same alone and beside others."""
import pytest
import torch
from tinymodels import tiny_model

import suite
from suite.api import prepare
from suite.draft import Draft
from suite.loop import _scored, prefill
from suite.models.linear_forms import swap_linears
from suite.models.step import fixed_step

WIDTH, PREFILL, NEW = 8, 16, 20
FORMS = {1: "wxt", 2: "onednn", 4: "linear", 8: "onednn", 16: "wxt", 32: "onednn"}   # a form per width
PROMPTS = [[5, 6, 7, 8, 9, 5, 6, 7, 10, 11, 12, 5, 6, 7], [20, 21, 22, 20, 21, 23, 24, 20, 21, 22, 20]]


@pytest.fixture(scope="module", params=[(a, d) for a in ("llama", "qwen2", "gpt2") for d in ("float32", "bfloat16")],
                ids=lambda p: f"{p[0]}-{p[1]}")
def fixed(request):
    arch, dtype = request.param
    model = tiny_model(arch, sharpen=1.0).to(getattr(torch, dtype))
    swap_linears(model, forms=FORMS, pinned="onednn")
    return fixed_step(model, WIDTH, PREFILL, max_cache_len=96)


def _prefilled(model, prompt):
    _, _, state = prepare(model, [prompt], decoder="ar", max_new_tokens=NEW)
    prefill(model, state, PREFILL)
    return state


def test_a_token_at_slot_k_gets_the_logits_it_gets_at_slot_0(fixed):
    tokens = PROMPTS[0] + [30, 31, 32, 33, 34, 35, 36, 37]
    prompt, follow = tokens[:len(PROMPTS[0])], tokens[len(PROMPTS[0]) - 1:-1]   # the last prompt token, then 7
    one_by_one = _prefilled(fixed, prompt)
    alone = []
    for i, t in enumerate(follow):                           # ar's steps: one real slot, seven empty ones
        draft = Draft.from_rows([[t]], [[len(prompt) - 1 + i]], device=one_by_one.device)
        alone.append(_scored(fixed, one_by_one, draft, WIDTH)[0][0, 0])
    together = _prefilled(fixed, prompt)                     # one step of eight real slots
    draft = Draft.from_rows([follow], [list(range(len(prompt) - 1, len(prompt) - 1 + len(follow)))],
                            device=together.device)
    wide = _scored(fixed, together, draft, WIDTH)[0][0]
    for k, logits in enumerate(alone):
        assert torch.equal(logits, wide[k]), f"slot {k}"


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_row_gets_the_same_logits_alone_and_in_a_batch(dtype):
    """On a model of SmolLM2's widths (576 wide, 1536 inner: a GEMM library rounds a row of such a product
    by how many rows share the call) with the forms measured on this CPU, and rows of several lengths (a
    short row's step writes right after its own prompt, not behind the longest row's): a row's logits at
    a step of eight slots after its prefill chunk are bitwise the same alone and in a batch of eight."""
    import transformers as tf
    torch.manual_seed(0)
    config = tf.LlamaConfig(vocab_size=256, hidden_size=576, intermediate_size=1536, num_hidden_layers=2,
                            num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=256)
    model = tf.LlamaForCausalLM(config).eval().to(getattr(torch, dtype))
    swap_linears(model)
    step = fixed_step(model, WIDTH, 64, max_cache_len=160)
    prompts = [[(7 * b + 3 * i) % 256 for i in range(length)] for b, length in enumerate([40, 37, 40, 33, 40, 29, 40, 38])]
    follow = list(range(100, 100 + WIDTH))

    def step_logits(rows):
        _, _, state = prepare(step, rows, decoder="ar", max_new_tokens=NEW)
        prefill(step, state, 64)
        draft = Draft.from_rows([[r[-1]] + follow[1:] for r in rows],
                                [list(range(len(r) - 1, len(r) - 1 + WIDTH)) for r in rows], device=state.device)
        return _scored(step, state, draft, WIDTH)[0]

    together = step_logits(prompts)
    for b, prompt in enumerate(prompts):
        assert torch.equal(step_logits([prompt])[0], together[b]), f"row {b} ({len(prompt)} tokens)"


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_row_gets_the_same_logits_at_the_width_of_every_row_count(dtype):
    """A step of many rows scores fewer slots a row (suite.models.step.width_at: 8 alone, 4 beside two
    others, 1 among eight): `ar`'s logits of a row, step by step, are bitwise the same at each, and a
    drafting decoder beside seven others gives `ar`'s tokens. (With each width's own matmul form, none
    pinned, float32 fails here.)"""
    import transformers as tf
    from suite.models.step import width_at
    torch.manual_seed(0)
    config = tf.LlamaConfig(vocab_size=256, hidden_size=576, intermediate_size=1536, num_hidden_layers=2,
                            num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=256)
    model = tf.LlamaForCausalLM(config).eval().to(getattr(torch, dtype))
    swap_linears(model, forms=FORMS, pinned="onednn")
    step = fixed_step(model, WIDTH, 64, max_cache_len=160)
    prompts = [[(7 * b + 3 * i) % 256 for i in range(length)] for b, length in enumerate([40, 37, 40, 33, 40, 29, 40, 38])]
    assert [width_at(step.capabilities.row_widths, n) for n in (1, 3, 8)] == [8, 4, 1]
    seen = []
    hook = model.lm_head.register_forward_hook(lambda module, args, out: seen.append(out[0, 0].clone()))

    def row0_logits(rows):
        seen.clear()
        out = suite.generate(step, rows, decoder="ar", max_new_tokens=12)
        return out.sequences[0], list(seen)

    try:
        alone, alone_logits = row0_logits(prompts[:1])
        for n in (3, 8):
            tokens, logits = row0_logits(prompts[:n])
            assert torch.equal(tokens[:len(alone)], alone) and len(logits) == len(alone_logits), n
            for k, (a, b) in enumerate(zip(alone_logits[1:], logits[1:])):     # decode steps (not the prefill chunk)
                assert torch.equal(a, b), (n, k)
    finally:
        hook.remove()
    ar = suite.generate(step, prompts, decoder="ar", max_new_tokens=12)
    assert torch.equal(suite.generate(step, prompts, decoder="ngram", max_new_tokens=12).sequences, ar.sequences)


@pytest.mark.parametrize("bucket", [64, 4], ids=["one-window", "window-every-4-slots"])
@pytest.mark.parametrize("rows", [[0, 1]], ids=["ragged2"])
def test_lossless_decoders_give_ar_tokens_bitwise(fixed, rows, bucket, monkeypatch):
    """Also when attention's window (suite.models.static_cache.attention_window) changes every few slots, so that
    `ar` and a drafting decoder score the same token over windows of different lengths."""
    monkeypatch.setattr("suite.models.static_cache.WINDOW_BUCKET", bucket)
    prompts = [PROMPTS[r] for r in rows]
    ar = suite.generate(fixed, prompts, decoder="ar", max_new_tokens=NEW)
    assert ar.stats.num_new_tokens == NEW * len(rows)
    for name in suite.TEXT_DECODERS:
        options = {"draft": "self:1"} if name == "speculative" else {}
        if name == "speculative" and "gpt2" in type(fixed.model).__name__.lower():
            continue                                   # gpt2 has no layer-truncated self-draft here
        out = suite.generate(fixed, prompts, decoder=name, max_new_tokens=NEW, **options)
        assert torch.equal(out.sequences, ar.sequences), name


def test_drafts_fill_the_step_and_never_pass_it(fixed):
    """Sized over the fixed step's curve, a drafting decoder's steps are at most WIDTH slots a row."""
    from suite.loop import decode_steps
    _, decoder, state = prepare(fixed, [PROMPTS[0] * 3], decoder="ngram", max_new_tokens=NEW)
    steps = list(decode_steps(fixed, decoder, state))
    widths = [step.draft_size for step in steps if any(step.committed)]          # decode steps, not prefill chunks
    assert max(widths) <= WIDTH and max(widths) > 1 and len(steps) - len(widths) == 3   # 41 prompt tokens: 3 chunks


def test_every_kept_slot_saw_every_slot_before_it(fixed, monkeypatch):
    """On the fixed step drafts are chains (suite.loop.DecodeState.fixed_step): a slot whose K/V stays, and
    whose logits committed a token, saw the slots before it with none between (a tree's node past a sibling's
    slot would sum its attention in another order than `ar`); tree decoders draft their best path."""
    import suite.loop
    steps, drop = [], suite.loop._drop_rejected
    monkeypatch.setattr(suite.loop, "_drop_rejected",
                        lambda cache, draft, acc, slots: steps.append((draft, acc)) or drop(cache, draft, acc, slots))
    for name in suite.TEXT_DECODERS:
        if name == "speculative":
            continue                                   # its drafts come from a second model: chains
        steps.clear()
        suite.generate(fixed, [PROMPTS[0] * 2, PROMPTS[1]], decoder=name, max_new_tokens=NEW)
        for draft, acc in steps:
            for b in range(draft.tokens.shape[0]):
                kept = acc.keep[b].nonzero().flatten().tolist()
                assert kept == list(range(len(kept))), (name, kept)
                for i in kept:
                    assert draft.mask[b, i, :i + 1].all(), (name, i, draft.mask[b, i])
