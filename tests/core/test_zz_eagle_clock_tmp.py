import random, time
import suite
from tinymodels import tiny_model, tiny_eagle_head
from suite.decoders.chain.auto import Auto
from suite.decoders.chain import eagle as eagle_module

def test_eagle_clock(monkeypatch, tmp_path):
    monkeypatch.setenv("PARASUITE_COST", "1"); monkeypatch.setenv("PARASUITE_CACHE", str(tmp_path))
    model = tiny_model("llama")
    head = tiny_eagle_head(model)
    ids = [[5, 6, 7, 8, 9, 5, 6, 7, 30, 31, 30, 31], [20, 21, 22, 20, 21, 5, 6, 7, 8]]
    dec = Auto(draft_head=head, candidates=("eagle", "ngram", "ar"), recheck=3)
    real, runs = time.perf_counter, []
    for clock in (None, 0, 1):
        if clock is not None:
            jumps = random.Random(clock)
            monkeypatch.setattr(time, "perf_counter", lambda: real() + 10 * jumps.random())
        out = suite.generate(model, ids, decoder=dec, max_new_tokens=40)
        runs.append((out.stats.num_forwards, {k: v for k, v in out.stats.events.items() if k.startswith("auto:")}))
    print(runs)
    assert runs[0] == runs[1] == runs[2]
