"""What the speech CLIs write looks like every other output: a WAV's mode is a plain file's."""
import os
import stat

import numpy as np


def test_a_wav_gets_the_mode_of_any_other_output(tmp_path):
    from speech.tts import write_wav
    umask = os.umask(0o022)
    try:
        write_wav(tmp_path / "hello.wav", np.zeros(160, dtype=np.float32), 16000)
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tmp_path / "hello.wav").stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["hello.wav"]              # no temporary file left
