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


# -- the "structured" group (python -m text.bench --group structured): extraction into a JSON schema --------

# strings and arrays are bounded (maxLength, maxItems), as extraction schemas are: the 135M model
# otherwise repeats list items (or a word inside a string) until max_new_tokens
_TEXT = {"type": "string", "maxLength": 40}
_PERSON = {"type": "object", "properties": {
    "name": _TEXT, "age": {"type": "integer"},
    "role": {"enum": ["engineer", "manager", "designer", "teacher", "doctor"]},
    "skills": {"type": "array", "items": _TEXT, "maxItems": 4},
    "address": {"type": "object", "properties": {"city": _TEXT, "country": _TEXT}, "required": ["city", "country"]}},
    "required": ["name", "age", "role", "skills", "address"]}
_ORDER = {"type": "object", "properties": {
    "order_id": _TEXT, "customer": _TEXT,
    "items": {"type": "array", "maxItems": 3, "items": {"type": "object", "properties": {
        "product": _TEXT, "quantity": {"type": "integer"}, "price": {"type": "number"}},
        "required": ["product", "quantity", "price"]}},
    "status": {"enum": ["pending", "shipped", "delivered", "cancelled"]}},
    "required": ["order_id", "customer", "items", "status"]}
_EVENT = {"type": "object", "properties": {
    "title": _TEXT, "date": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"}, "location": _TEXT,
    "attendees": {"type": "array", "maxItems": 4, "items": {"type": "object", "properties": {
        "name": _TEXT, "role": {"enum": ["speaker", "organizer", "guest"]}},
        "required": ["name", "role"]}},
    "online": {"type": "boolean"}},
    "required": ["title", "date", "location", "attendees", "online"]}

# (name, schema, text to extract from); the prompt asks for the schema's fields as JSON
STRUCTURED = (
    ("person 1", _PERSON, "Maria Lopez is a 34-year-old engineer from Madrid, Spain. She knows Python, SQL and Docker."),
    ("person 2", _PERSON, "Dr. Kenji Tanaka, 52, works as a doctor in Osaka, Japan. His skills: surgery, research."),
    ("order 1", _ORDER, "Order A-1042 from Jane Miller: 2 blue mugs at 8.50 each and 1 teapot at 24.00. "
                        "It was shipped yesterday."),
    ("order 2", _ORDER, "Customer Omar Haddad placed order 77-B for 3 notebooks (4.25 each). It is still pending."),
    ("event 1", _EVENT, "The Data Science Meetup takes place on 2025-05-14 at the Berlin Tech Hub. Anna Schmidt "
                        "speaks, Tom Becker organizes it. It is not online."),
    ("event 2", _EVENT, "Join the online workshop 'Intro to Rust' on 2025-09-02, hosted on Zoom. Speaker: "
                        "Lee Park; organizer: Sara Cole."),
)


def structured_prompt(schema: dict, text: str) -> str:
    """The extraction prompt of a STRUCTURED case: the fields asked for by name, then the text."""
    return f"Extract the information as JSON with the keys {', '.join(schema['properties'])}.\nText: {text}"
