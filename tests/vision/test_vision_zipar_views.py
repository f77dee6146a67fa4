"""The ZipAR training views (vision/zipar_views.py) are exactly what the zipar decoder shows the
prior: a greedy zipar decode equals the argmax of each cell's view, cell for cell."""
import pytest
import torch

from tinymodels import tiny_prior

import suite
from suite.decoders.raster.zipar import ZipAR
from vision.zipar_views import zipar_layout, zipar_logits, zipar_loss


@pytest.mark.parametrize("grid,window", [((4, 4), 1), ((4, 4), 3), ((3, 5), 2)])
def test_views_reproduce_greedy_zipar(grid, window):
    prior = tiny_prior(grid=grid, seed=3)
    h, w = grid
    labels = torch.tensor([0, 1, 2])
    prompt = torch.tensor([[prior.class_token(int(c))] for c in labels])
    out = suite.generate(prior, prompt, decoder=ZipAR(window=window), max_new_tokens=h * w)
    codes = torch.tensor(out.new_tokens)
    layout = zipar_layout(h, w, window)
    with torch.no_grad():
        views = zipar_logits(prior.model, codes, prompt[:, 0], layout, prior.codebook_size)
        raster = prior.model(input_ids=torch.cat([prompt, codes[:, :-1]], 1)).logits[..., :prior.codebook_size]
    assert torch.equal(views.argmax(-1), codes)
    assert (views - raster).abs().max() > 1e-3          # the views differ from raster ones


def test_views_mask_and_loss():
    layout = zipar_layout(4, 4, 3)
    assert layout.mask.shape == (1 + 16 + 3, 1 + 16 + 3)
    seen_placeholders = layout.mask[:, 17:].clone()
    seen_placeholders[torch.arange(17, 20), torch.arange(3)] = False
    assert not seen_placeholders.any()                   # a placeholder is seen by itself alone
    assert layout.mask[:, 0].all()                       # everyone sees the class token
    prior = tiny_prior()
    codes = torch.randint(prior.codebook_size, (2, 16))
    loss = zipar_loss(prior.model, codes, torch.tensor([16, 17]), layout, prior.codebook_size)
    assert loss.ndim == 0 and torch.isfinite(loss)
    with pytest.raises(ValueError, match="window"):
        zipar_layout(4, 4, 4)
