"""The prompt set the EAGLE draft head is trained on, built offline from material on this machine.

Three kinds, like the bench's groups:
  * chat: instruction templates x subjects (written here), in the chat template;
  * code: raw completion prompts, the head of a documented function of Python's standard library
    (its `def` line and docstring);
  * input-grounded: a task over a given passage (a standard-library function to document or
    rename, a standard-library docstring paragraph with injected typos to fix, or to list facts from).
Each prompt carries its source (a subject, a module); a source whose hash falls in the held-out
share is never trained on, so the held-out prompts test subjects and modules the head never saw.
"""
from __future__ import annotations

import ast
import hashlib
import random
import sysconfig
import textwrap
from dataclasses import asdict, dataclass
from pathlib import Path

HELD_OUT_SHARE = 0.12

SUBJECTS = """a hash table|photosynthesis|the water cycle|a black hole|compound interest|a bicycle gear|vaccines|
the stock market|a solar panel|machine learning|the French Revolution|a volcano|the immune system|a compiler|
a refrigerator|the moon's phases|an electric car|the internet|a bank loan|recycling|a rainbow|earthquakes|
the human heart|a wind turbine|democracy|a credit card|coffee roasting|bread baking|a garden in spring|
a lighthouse keeper|a lost dog|a city at night|a dragon who is afraid of fire|a time traveller|a small bakery|
a chess tournament|a robot who learns to paint|a rainy afternoon|a mountain village|the first day of school|
a pirate ship|an old library|a space station|a talking cat|a friendship between two trees|a jazz musician|
sorting algorithms|recursion|binary search|a linked list|public key cryptography|a database index|
the TCP handshake|garbage collection|unit testing|version control with git|a REST API|regular expressions|
object-oriented programming|functional programming|a neural network|gradient descent|the Pythagorean theorem|
prime numbers|probability|fractions|the speed of light|gravity|magnets|electricity|the periodic table|
climate change|the ocean tides|honey bees|dinosaurs|the Roman Empire|the printing press|the steam engine|
airplanes|a submarine|the human brain|sleep|healthy breakfast|learning a new language|time management|
writing a resume|a job interview|saving money|running a marathon|meditation|team work|public speaking|
a birthday party|a picnic|a road trip|moving to a new city|a thunderstorm|autumn leaves|a snowman|
a clock tower|a train journey|a music festival|a chess opening|a football match|the Olympic games|
a museum visit|a farmer's market|a haunted house|a secret garden|a treasure map|an island|a desert|
the rainforest|penguins|elephants|octopuses|owls|wolves|a beehive|an ant colony|mushrooms|cheese making|
tea ceremonies|chocolate|pizza|sushi|a vegetable soup|a lemon cake|paper airplanes|origami|knitting|
photography|a telescope|the northern lights|a comet|Mars|Jupiter|the sun|a calendar|money|taxes|
insurance|a library card|email etiquette|passwords|a smartphone battery|Wi-Fi|a printer|a keyboard|
spreadsheets|a search engine|open source software|a text editor|a web browser|cloud storage""".replace("\n", "")

CHAT_TEMPLATES = [
    "Explain {s} to a beginner.", "Write a short story about {s}.", "Write a short poem about {s}.",
    "What are three interesting facts about {s}?", "Give me a simple explanation of {s} in a few sentences.",
    "What are the pros and cons of {s}?", "Describe {s} to a ten-year-old.", "Write a blog post introduction about {s}.",
    "List five questions a student might ask about {s}, with short answers.", "Why is {s} important?",
    "Write a dialogue between two friends talking about {s}.", "Summarize what people should know about {s}.",
    "How would you teach someone about {s}?", "Write a haiku and then a limerick about {s}.",
    "Give step-by-step instructions related to {s}.", "Compare {s} with something from everyday life.",
]

GROUNDED_CODE_TASKS = [
    "Add a docstring to this Python function and return the whole code.",
    "Add type hints to this Python function and return the whole code.",
    "Rename the variable `{var}` to `{new}` in this Python code and return the whole code.",
    "Explain what this Python function does, line by line.",
    "Add comments to this Python code and return the whole code.",
]
GROUNDED_TEXT_TASKS = [
    "Fix the spelling mistakes in this text. Reply with the corrected text only.",
    "List every name, number and technical term mentioned in this text.",
    "Rewrite this text in simpler words.",
    "Summarize this text in two sentences.",
    "Repeat this text with each sentence on its own line.",
]


@dataclass(frozen=True)
class Prompt:
    text: str
    kind: str        # "chat", "code" or "grounded"
    chat: bool       # wrap in the chat template
    source: str      # subject or module: the unit of the held-out split

    def as_dict(self) -> dict:
        return asdict(self)


def held_out(source: str) -> bool:
    digest = hashlib.sha256(source.encode()).digest()
    return int.from_bytes(digest[:4], "big") / 2 ** 32 < HELD_OUT_SHARE


def _stdlib_files() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    skip = ("test", "idlelib", "lib2to3", "tkinter", "turtledemo", "site-packages", "ensurepip", "__pycache__")
    return sorted(p for p in root.rglob("*.py") if not any(part in skip for part in p.relative_to(root).parts))


def _functions(path: Path):
    """(module, source of the function, its head: def line + docstring, a local name) of documented
    top-level functions and methods of 4-30 lines."""
    try:
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source)
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return
    lines = source.splitlines()
    module = path.stem
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef) or not ast.get_docstring(node):
            continue
        body = lines[node.lineno - 1:node.end_lineno]
        if not 4 <= len(body) <= 30 or any(len(line) > 100 for line in body):
            continue
        code = textwrap.dedent("\n".join(body))
        doc_end = node.body[0].end_lineno - node.lineno + 1
        head = textwrap.dedent("\n".join(body[:doc_end])) + "\n"
        names = sorted({n.id for n in ast.walk(node) if isinstance(n, ast.Name) and len(n.id) > 3
                        and n.id.islower() and n.id not in dir(__builtins__)})
        yield module, code, head, names


def _paragraphs(path: Path):
    """(module, paragraph) of standard-library docstrings: plain prose of 200-700 characters."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)):
            doc = ast.get_docstring(node) or ""
            for para in doc.split("\n\n"):
                flat = " ".join(para.split())
                if 200 <= len(flat) <= 700 and flat.count(">>>") == 0 and sum(c.isalpha() for c in flat) > 0.75 * len(flat):
                    yield path.stem, flat


def _typos(text: str, rng: random.Random) -> str:
    words = text.split(" ")
    for i in rng.sample(range(len(words)), k=max(1, len(words) // 12)):
        w = words[i]
        if len(w) > 4 and w.isalpha():
            j = rng.randrange(1, len(w) - 2)
            words[i] = w[:j] + w[j + 1] + w[j] + w[j + 2:]
    return " ".join(words)


def build_prompts(seed: int = 0) -> list[Prompt]:
    """Every prompt of the three kinds, in a fixed order (sources split by `held_out`)."""
    rng = random.Random(seed)
    out = []
    subjects = [s.strip() for s in SUBJECTS.split("|") if s.strip()]
    for s in subjects:
        for t in rng.sample(CHAT_TEMPLATES, 6):
            out.append(Prompt(t.format(s=s), "chat", True, "subject:" + s))
    files = _stdlib_files()
    for path in files:
        for module, code, head, names in _functions(path):
            src = "module:" + module
            out.append(Prompt(head, "code", False, src))
            task = rng.choice(GROUNDED_CODE_TASKS)
            if "{var}" in task:
                if not names:
                    continue
                var = rng.choice(names)
                task = task.format(var=var, new=var + "_value")
            out.append(Prompt(task + "\n\n" + code, "grounded", True, src))
        for module, para in _paragraphs(path):
            task = rng.choice(GROUNDED_TEXT_TASKS)
            body = _typos(para, rng) if task.startswith("Fix") else para
            out.append(Prompt(task + "\n\n" + body, "grounded", True, "module:" + module))
    return out


def split(prompts: list[Prompt], per_kind: dict[str, int], held_per_kind: dict[str, int], seed: int = 0):
    """(train, held-out): `per_kind[k]` training prompts and `held_per_kind[k]` held-out ones of each kind,
    drawn at random; held-out prompts come only from held-out sources."""
    rng = random.Random(seed)
    train, held = [], []
    for kind in per_kind:
        pool = [p for p in prompts if p.kind == kind]
        rng.shuffle(pool)
        train += [p for p in pool if not held_out(p.source)][:per_kind[kind]]
        held += [p for p in pool if held_out(p.source)][:held_per_kind.get(kind, 0)]
    return train, held
