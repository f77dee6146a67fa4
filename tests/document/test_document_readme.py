"""The README's OCR example reads its own line: the example's lines, run as written (with the block's
PIL import), give the drawn text from `ocr(...)` with every line decoder the app offers by default
and from `document.read`."""
import ast
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
DECODERS = ("ar", "s2d2", "block_diffusion", "ctc_speculative", "auto")


def example() -> tuple[str, str]:
    """(code, drawn text) of the README's document example: from `import document` to the blank line."""
    head = "import document\nocr = document.load_ocr()"
    block = next(b for b in re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S) if head in b)
    start = block.index(head)
    code = block[start:block.index("\n\n", start)]
    imports = "\n".join(line for line in block.splitlines() if line.startswith("from PIL import"))
    drawn = re.search(r"\.text\(\([^)]*\), \"([^\"]+)\"", code).group(1)
    return imports + "\n" + code, drawn


@pytest.fixture(scope="module")
def ran():
    code, drawn = example()
    namespace = {"__name__": "__readme__"}
    exec(compile(code, "README.md, the document example", "exec"), namespace)
    return namespace, drawn, code


def test_the_example_draws_a_line_the_reader_reads(ran):
    namespace, drawn, code = ran
    shown = [node for node in ast.parse(code).body if isinstance(node, ast.Expr) and ".texts" in ast.unparse(node)]
    assert shown, "the example shows ocr(...).texts"
    for node in shown:
        assert eval(ast.unparse(node), namespace) == [drawn]
    assert namespace["pages"][0].text == drawn


@pytest.mark.parametrize("decoder", DECODERS)
def test_every_decoder_reads_the_example_line(ran, decoder):
    namespace, drawn, _ = ran
    assert namespace["ocr"]([namespace["line"]], decoder=decoder).texts == [drawn]
