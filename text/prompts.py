"""The fixed prompt set of `python -m text.bench`, in three groups (chat prompts unless noted)."""

_CODE = '''def load_config(path, defaults=None):
    result = dict(defaults or {})
    with open(path) as handle:
        for number, line in enumerate(handle, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if "=" not in line:
                raise ValueError(f"line {number}: expected key = value")
            key, value = line.split("=", 1)
            result[key.strip()] = value.strip()
    return result


def save_config(path, config):
    with open(path, "w") as handle:
        for key in sorted(config):
            handle.write(f"{key} = {config[key]}\\n")
'''

_REPORT = ("The quarterly meeting was held on March 3 in the Berlin office. Anna Schmidt presented the "
           "sales figures: revenue grew by 12 percent to 4.2 million euros, driven by the new online shop. "
           "Tom Becker reported that the warehouse move is delayed until June because the new shelving "
           "has not arrived. The team agreed to hire two more support staff before the summer. Contact "
           "anna.schmidt@example.com or call +49 30 1234567 for the full slides. The next meeting is on "
           "June 5, and Tom will send the agenda one week before.")

_TYPOS = ("Our compnay was founded in 1998 by two freinds who wanted to make good coffe affordable. "
          "Today we run twelve shops acros the city and we roast all of our beans ourselfs. Every "
          "morning the first batch is ready at six oclock, and our bakers make fresh bread evrey day.")

GROUNDED = [
    "Fix the spelling mistakes in this text. Reply with the corrected text only.\n\n" + _TYPOS,
    "Add a docstring to each function in this Python code and return the whole code.\n\n" + _CODE,
    "Rename the variable `handle` to `stream` in this Python code and return the whole code.\n\n" + _CODE,
    "List every name, date, number and email address mentioned in this report.\n\n" + _REPORT,
]

CODE = [  # raw completion prompts (no chat template)
    "import json\nimport os\n\n\nclass TodoList:\n    \"\"\"A list of todo items stored in a JSON file.\"\"\"\n\n"
    "    def __init__(self, path):\n        self.path = path\n        self.items = []\n\n    def load(self):\n",
    "def is_prime(n):\n    \"\"\"Return True if n is a prime number.\"\"\"\n",
]

CHAT = [
    "Write a short story about a robot who learns to paint.",
    "Explain how a hash table works to a beginner.",
]

GROUPS = {"input-grounded": [(p, True) for p in GROUNDED], "code": [(p, False) for p in CODE],
          "chat": [(p, True) for p in CHAT]}   # group -> [(prompt, chat template?)]


def held_out_group(per_kind: int = 2) -> list[tuple[str, bool]]:
    """The first `per_kind` chat, code and input-grounded prompts of the EAGLE head's held-out set
    (text/weights/eagle/held_out.json: subjects and modules its training never saw); [] without it."""
    import json
    from pathlib import Path
    path = Path(__file__).parent / "weights" / "eagle" / "held_out.json"
    try:
        prompts = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    out = []
    for kind in ("chat", "code", "grounded"):
        out += [(p["text"], p["chat"]) for p in prompts if p["kind"] == kind][:per_kind]
    return out
