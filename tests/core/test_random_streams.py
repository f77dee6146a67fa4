"""suite.random_streams: a row's uniform is a pure function of (row key, position, purpose, draw),
the same on any batch layout; streams look independent and uniform; keys move with their rows."""
import random

import pytest
import torch

from suite.random_streams import ACCEPT, DRAFT, SAMPLE, RowStreams, mix, mix_int, row_keys, uniforms


def test_tensor_mix_is_splitmix64():
    xs = [random.Random(0).getrandbits(64) for _ in range(1)] + [random.Random(i).getrandbits(64) for i in range(500)]
    signed = torch.tensor([x - (1 << 64) if x >> 63 else x for x in xs])
    assert mix(signed).tolist() == [mix_int(x) for x in xs]
    # splitmix64's published first output for state 0 (x + golden, then the finaliser)
    assert mix_int(0) % (1 << 64) == 0xE220A8397B1DCDAF


def test_same_key_position_purpose_same_uniform_on_any_layout():
    """Row 1 of seed 7 at position 12 draws the same alone, in a padded batch, after other rows
    were selected out, or appended to another request's rows."""
    alone = RowStreams.seeded(7, 3, "cpu").uniform([[12]], ACCEPT, rows=[1])[0, 0]
    batch = RowStreams.seeded(7, 3, "cpu")
    wide = batch.uniform(torch.arange(20)[None].expand(3, 20), ACCEPT)             # (B, N) padded layout
    assert wide[1, 12] == alone
    batch.select([2, 1])
    assert batch.uniform(torch.tensor([[0], [12]]), ACCEPT)[1, 0] == alone
    other = RowStreams.seeded(None, 2, "cpu")
    other.extend(batch)
    assert other.uniform(torch.full((4, 1), 12), ACCEPT)[3, 0] == alone
    assert batch.row(1, 12, ACCEPT, 2)[0] == alone               # draw 0 of the per-row form


def test_values_in_unit_interval_and_uniform():
    u = RowStreams.seeded(0, 8, "cpu").uniform(torch.arange(20000).expand(8, -1), SAMPLE).flatten()
    assert u.dtype == torch.float32 and float(u.min()) >= 0.0 and float(u.max()) < 1.0
    counts = torch.histc(u, bins=20, min=0.0, max=1.0)
    expected = u.numel() / 20
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 50, chi2                       # 19 degrees of freedom: p < 1e-4 above 45


@pytest.mark.parametrize("other", ["purpose", "position", "draw", "row", "seed"])
def test_streams_look_independent(other):
    """Changing any one coordinate gives uncorrelated values (and, but for the position, not a
    shifted copy of the stream)."""
    keys = torch.tensor(row_keys(0, 2))
    positions = torch.arange(5000)
    base = uniforms(keys[0], positions, SAMPLE)
    changed = {"purpose": uniforms(keys[0], positions, DRAFT), "position": uniforms(keys[0], positions + 1, SAMPLE),
               "draw": uniforms(keys[0], positions, SAMPLE, 1), "row": uniforms(keys[1], positions, SAMPLE),
               "seed": uniforms(torch.tensor(row_keys(1, 1)[0]), positions, SAMPLE)}[other]
    corr = float(torch.corrcoef(torch.stack([base, changed]))[0, 1])
    assert abs(corr) < 0.05, corr
    if other != "position":
        assert not torch.equal(base[1:], changed[:-1])


def test_unseeded_requests_draw_a_random_key_once():
    a, b = RowStreams.seeded(None, 2, "cpu"), RowStreams.seeded(None, 2, "cpu")
    assert not torch.equal(a.keys, b.keys) and a.keys[0] != a.keys[1]
    assert torch.equal(RowStreams.seeded(4, 2, "cpu").keys, RowStreams.seeded(4, 2, "cpu").keys)
