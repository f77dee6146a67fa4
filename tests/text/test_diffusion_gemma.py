"""DiffusionGemma (transformers' block-diffusion LM) through text.load(folder): a tiny random model saved
with save_pretrained. The family's own sampler (decoder="diffusion_gemma") gives the same tokens as the
family's `generate` for the same settings and seed; every block commit rule decodes it with fewer forwards
than new tokens; settings no decoder can honour are refused, naming the setting."""
import json
import shutil

import pytest
import torch
from tinymodels import tiny_diffusion_gemma, tiny_word_tokenizer

import text

PROMPT = "w5 w6 w7 w8 w9"
RULES = ("block_diffusion", "fast_dllm_factor", "prophet", "credit", "entropy_bounded")


def save(folder, model):
    model.save_pretrained(str(folder))
    tiny_word_tokenizer().save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    # sliding_window 8: the prompt and two canvases pass it, so the sliding layers' masks are checked too
    return save(tmp_path_factory.mktemp("dgemma"), tiny_diffusion_gemma(sliding_window=8))


@pytest.fixture(scope="module")
def gen(folder):
    return text.load(folder)


def variant(folder, dest, config=None, text_config=None, generation=None):
    """A copy of the saved folder with some settings changed in its JSON files (no new model built)."""
    shutil.copytree(folder, dest)
    for name, changes, sub in (("config.json", config, None), ("config.json", text_config, "text_config"),
                               ("generation_config.json", generation, None)):
        if changes:
            data = json.loads((dest / name).read_text())
            (data[sub] if sub else data).update(changes)
            (dest / name).write_text(json.dumps(data))
    return dest


def family(gen, seed, max_new_tokens, **settings):
    """The family's own generate on the same weights: its new tokens (the first max_new_tokens: it fills
    whole canvases), cut after the first EOS as our rows end."""
    model = gen.model.model
    ids = torch.tensor([gen.rows(PROMPT)[0]])
    torch.manual_seed(seed)
    out = model.generate(ids, max_new_tokens=max_new_tokens, **settings).sequences[0, ids.shape[1]:].tolist()
    out = out[:max_new_tokens]
    eos = settings.get("eos_token_id")
    return out[:out.index(eos) + 1] if eos in out else out


def test_load_gives_a_generator_over_the_diffusion_gemma_adapter(gen):
    from text.diffusion_gemma import DiffusionGemmaAdapter
    assert isinstance(gen.model, DiffusionGemmaAdapter)
    assert gen.decoders[0] == "diffusion_gemma" and set(RULES) <= set(gen.decoders)
    assert gen.generate(PROMPT, max_new_tokens=8, seed=0, max_denoising_steps=2).stats.num_forwards == 2   # auto


@pytest.mark.parametrize("settings", [
    {},                                                             # the family's defaults: 48 steps, adaptive stop
    {"max_denoising_steps": 5},
    {"max_denoising_steps": 6, "stability_threshold": 0, "confidence_threshold": 50.0},   # stops at the first step
    {"max_denoising_steps": 8, "entropy_bound": 2.0, "t_min": 0.1, "t_max": 2.0},
], ids=["defaults", "steps5", "adaptive-stop", "bound-and-schedule"])
@pytest.mark.parametrize("seed", [0, 7])
def test_sampler_equals_the_familys_generate(gen, settings, seed):
    ours = gen.generate(PROMPT, decoder="diffusion_gemma", max_new_tokens=20, seed=seed, **settings)
    theirs = family(gen, seed, 20, **{k: v for k, v in settings.items() if k != "entropy_bound"},
                    **({"sampler_config": _sampler(settings["entropy_bound"])} if "entropy_bound" in settings else {}))
    assert ours.token_ids == theirs
    assert ours.stats.num_forwards <= 3 * (settings.get("max_denoising_steps") or 48)


def _sampler(bound):
    from transformers.models.diffusion_gemma.generation_diffusion_gemma import EntropyBoundSamplerConfig
    return EntropyBoundSamplerConfig(entropy_bound=bound)


def test_sampler_equals_the_familys_generate_with_another_block_size_and_eos(folder, tmp_path):
    """canvas_length 4 (the block size), EOS from the folder's generation config: the row ends at it."""
    probe = variant(folder, tmp_path / "probe", config={"canvas_length": 4})
    eos = text.load(probe).generate(PROMPT, decoder="diffusion_gemma", max_new_tokens=12, seed=3,
                                    max_denoising_steps=4).token_ids[6]
    g = text.load(variant(probe, tmp_path / "eos", generation={"eos_token_id": eos}))
    ours = g.generate(PROMPT, decoder="diffusion_gemma", max_new_tokens=12, seed=3, max_denoising_steps=4)
    assert ours.token_ids == family(g, 3, 12, max_denoising_steps=4, eos_token_id=eos)
    assert ours.token_ids[-1] == eos and ours.finish_reason == "eos" and len(ours.token_ids) <= 7


@pytest.mark.parametrize("rule", RULES)
def test_block_rules_take_fewer_forwards_than_tokens(gen, rule):
    res = gen.generate(PROMPT, decoder=rule, max_new_tokens=24)
    assert len(res.token_ids) == 24
    assert res.stats.num_forwards < res.stats.num_new_tokens


def test_causal_decoders_are_refused_naming_the_ones_that_apply(gen):
    import suite
    for name in ("ar", "jacobi", "s2d2"):
        with pytest.raises(ValueError, match="diffusion_gemma, block_diffusion"):
            gen.generate(PROMPT, decoder=name, max_new_tokens=4)
    with pytest.raises(ValueError, match="DiffusionGemmaAdapter"):      # the bare model is no causal LM
        suite.generate(gen.model.model, [[5, 6]], decoder="ar")


def test_settings_a_decoder_cannot_honour_are_refused(gen, folder, tmp_path):
    with pytest.raises(ValueError, match="temperature"):
        gen.generate(PROMPT, decoder="diffusion_gemma", max_new_tokens=4, temperature=0.7)
    with pytest.raises(ValueError, match="top_k"):
        gen.generate(PROMPT, decoder="diffusion_gemma", max_new_tokens=4, top_k=5)
    with pytest.raises(ValueError, match="regex"):
        gen.generate(PROMPT, max_new_tokens=4, regex="w[0-9]+")
    with pytest.raises(ValueError, match="cache_implementation"):
        text.load(variant(folder, tmp_path / "quantized", generation={"cache_implementation": "quantized"}))
    with pytest.raises(ValueError, match="use_bidirectional_attention"):
        text.load(variant(folder, tmp_path / "bidirectional", text_config={"use_bidirectional_attention": "all"}))


def test_cli_decodes_a_diffusion_gemma_folder(folder, capsys):
    from text.__main__ import main
    assert main([PROMPT, "--model", str(folder), "--seed", "0", "--max-new-tokens", "8",
                 "--option", "max_denoising_steps=4"]) == 0
    out, err = capsys.readouterr()
    assert out.strip() and "forward" in err
    assert main([PROMPT, "--model", str(folder), "--decoder", "entropy_bounded", "--max-new-tokens", "8"]) == 0
    assert main([PROMPT, "--model", str(folder), "--decoder", "ngram", "--max-new-tokens", "4"]) == 2
    assert "diffusion_gemma" in capsys.readouterr().err


@pytest.mark.parametrize("rule", ["block_diffusion", "entropy_bounded"])
def test_a_ragged_batch_decodes_each_row_as_alone(gen, rule):
    """Rows of other lengths (padding, dead slots, sliding layers past their window: the masked path)."""
    prompts = [PROMPT + " w10 w11", "w20 w21 w22"]
    both = gen.generate(prompts, decoder=rule, max_new_tokens=16)
    assert both.token_ids == [gen.generate(p, decoder=rule, max_new_tokens=16).token_ids for p in prompts]


def test_bench_group_reports_every_rule_and_the_familys_agreement(capsys):
    from text.bench import main
    main(["--group", "diffusion_gemma", "--prompts", "1", "--max-new-tokens", "8", "--steps", "2"])
    out = capsys.readouterr().out
    assert all(f"| {rule} |" in out for rule in RULES)
    assert "| diffusion_gemma, 2 steps | 8 | 2 |" in out and out.count("| 1/1 | 100% |") >= 4
