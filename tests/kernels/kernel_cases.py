"""Random inputs shared by the CPU-interpreter and GPU comparisons of Triton vs reference."""
import torch

from kernels import reference


def cases(device: str, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    for b, n, v in [(3, 4, 50), (2, 1, 1500), (4, 7, 2100), (1, 0, 33)]:
        p = torch.softmax(torch.randn(b, n + 1, v, generator=g) * 3, -1)
        q = torch.softmax(torch.randn(b, n, v, generator=g) * 3, -1)
        draft = torch.multinomial(q.reshape(-1, v), 1, generator=g).reshape(b, n) if n else torch.zeros(b, 0, dtype=torch.long)
        draft[0, :n // 2] = p[0, :n // 2].argmax(-1)        # some drafts that will pass
        u, u_next = torch.rand(b, n, generator=g), torch.rand(b, generator=g)
        lengths = torch.randint(0, n + 1, (b,), generator=g)                # a ragged batch
        yield [t.to(device) for t in (draft, q, p, u, u_next, lengths)]


def compare(module) -> list[str]:
    """Differences between `module` (Triton ops) and the reference, as messages."""
    problems = []
    device = "cuda" if torch.cuda.is_available() and "cuda" in str(module.__name__ + "cuda") else "cpu"
    for draft, q, p, u, u_next, lengths in cases(device):
        for qq, ll in [(q, None), (None, None), (q, lengths), (None, lengths)]:
            got = module.speculative_accept(draft, qq, p, u, u_next, ll)
            want = reference.speculative_accept(draft, qq, p, u, u_next, ll)
            if not all(torch.equal(a.cpu(), b.cpu()) for a, b in zip(got, want)):
                problems.append(f"speculative_accept q={'set' if qq is not None else 'None'} lengths={ll} "
                                f"{tuple(p.shape)}: {got} != {want}")
        target = p.argmax(-1)
        got, want = module.greedy_prefix(draft, target), reference.greedy_prefix(draft, target)
        if not all(torch.equal(a.cpu(), b.cpu()) for a, b in zip(got, want)):
            problems.append(f"greedy_prefix {tuple(draft.shape)}: {got} != {want}")
        logits = torch.log(p[:, 0])
        got, want = module.sample_logits(logits, 0.8, u_next), reference.sample_logits(logits, 0.8, u_next)
        if not torch.equal(got.cpu(), want.cpu()):
            problems.append(f"sample_logits {tuple(logits.shape)}: {got} != {want}")
    return problems
