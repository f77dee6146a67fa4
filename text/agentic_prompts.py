"""The agentic workload of `python -m text.bench --group agentic`: the kinds of requests where drafting from
what was already said pays most, each a stream of requests in order (later ones may reuse earlier answers).

  * tool calls: an agent's turns with JSON arguments (structured output), each turn's call and the tool's
    result in the next turn's history;
  * code edits: rename, add a parameter, reformat, each answer repeating most of the file;
  * multi-turn chat: later turns quote and rework the model's earlier answers;
  * extraction: the same JSON extraction over similar documents (structured output).

A session is a list of turns; a turn is (user message, JSON schema or None). The bench builds each turn's
prompt from the session's system message, the earlier turns and the model's own answers to them.
"""
from __future__ import annotations

TOOLS = """You are an assistant that calls tools. Answer every request with exactly one JSON tool call:
{"name": <tool>, "arguments": {...}}. The tools:
- get_weather(city: string, unit: "celsius" | "fahrenheit"): current weather of a city
- search_flights(origin: string, destination: string, date: string YYYY-MM-DD): flights on a day
- create_event(title: string, date: string YYYY-MM-DD, time: string HH:MM, attendees: list of emails)
- send_email(to: string, subject: string, body: string)"""


def _tool(name: str, args: dict) -> dict:
    return {"type": "object", "properties": {"name": {"const": name},
                                             "arguments": {"type": "object", "properties": args,
                                                           "required": list(args)}},
            "required": ["name", "arguments"]}


_S = {"type": "string", "maxLength": 80}
TOOL_SCHEMA = {"anyOf": [
    _tool("get_weather", {"city": _S, "unit": {"enum": ["celsius", "fahrenheit"]}}),
    _tool("search_flights", {"origin": _S, "destination": _S, "date": _S}),
    _tool("create_event", {"title": _S, "date": _S, "time": _S,
                           "attendees": {"type": "array", "items": _S, "maxItems": 4}}),
    _tool("send_email", {"to": _S, "subject": _S, "body": {"type": "string", "maxLength": 200}}),
]}

TOOL_TURNS = [
    "What is the weather in Lisbon right now? Use celsius.",
    "Tool result: {\"city\": \"Lisbon\", \"temperature\": 19, \"sky\": \"clear\"}. Now check the weather in Porto, "
    "also in celsius.",
    "Tool result: {\"city\": \"Porto\", \"temperature\": 16, \"sky\": \"cloudy\"}. Find flights from Lisbon to Porto "
    "on 2026-12-18.",
    "Tool result: [{\"flight\": \"TP1940\", \"departs\": \"08:10\"}]. Create an event titled \"Trip to Porto\" on "
    "2026-12-18 at 08:10 with ana@example.com and rui@example.com.",
    "Tool result: {\"ok\": true}. Email ana@example.com with the subject \"Trip to Porto\" and a body saying the "
    "flight TP1940 leaves at 08:10.",
    "Tool result: {\"sent\": true}. What is the weather in Madrid? Use celsius.",
]

_FILES = {
    "inventory.py": '''class Inventory:
    """Items in stock, by name."""

    def __init__(self):
        self.items = {}

    def add(self, name, count):
        if count <= 0:
            raise ValueError("count must be positive")
        self.items[name] = self.items.get(name, 0) + count

    def remove(self, name, count):
        have = self.items.get(name, 0)
        if count > have:
            raise ValueError("not enough " + name)
        self.items[name] = have - count
        if self.items[name] == 0:
            del self.items[name]

    def total(self):
        return sum(self.items.values())
''',
    "report.py": '''def summarize(rows):
    totals = {}
    for row in rows:
        region = row["region"]
        amount = row["amount"]
        if region not in totals:
            totals[region] = 0
        totals[region] += amount
    lines = []
    for region in sorted(totals):
        lines.append(region + ": " + str(totals[region]))
    return "\\n".join(lines)


def largest(rows):
    best = None
    for row in rows:
        if best is None or row["amount"] > best["amount"]:
            best = row
    return best
''',
}

CODE_EDITS = [
    f"Rename the method `remove` to `take` in this Python file and return the whole file.\n\n{_FILES['inventory.py']}",
    f"Add a parameter `default=0` to `total` that is returned when the inventory is empty, and return the whole "
    f"file.\n\n{_FILES['inventory.py']}",
    f"Rename the variable `totals` to `by_region` in this Python file and return the whole file.\n\n"
    f"{_FILES['report.py']}",
    f"Rewrite the string concatenations in this file as f-strings and return the whole file.\n\n"
    f"{_FILES['report.py']}",
]

CHAT_SESSIONS = [
    ["Give me a short recipe for pancakes, as a numbered list of steps.",
     "Repeat your recipe above, but make it for twice as many people.",
     "Now list only the ingredients from your last answer, one per line."],
    ["Explain in a few sentences what a binary search does.",
     "Quote the first sentence of your explanation, then explain it with an example list of numbers.",
     "Summarize both of your answers above in three bullet points."],
]

_DOC = ("Invoice {number} from {vendor}, dated {date}. Bill to: {customer}, {city}. Items: {items}. "
        "Total due: {total} EUR by {due}. Questions: {email}.")
DOCUMENTS = [
    _DOC.format(number="INV-2041", vendor="Nordlicht GmbH", date="2026-11-03", customer="Ana Ferreira",
                city="Lisbon", items="2 desk lamps at 45.00, 1 office chair at 189.00", total="279.00",
                due="2026-12-03", email="billing@nordlicht.example"),
    _DOC.format(number="INV-2042", vendor="Nordlicht GmbH", date="2026-11-05", customer="Rui Costa", city="Porto",
                items="1 standing desk at 420.00", total="420.00", due="2026-12-05", email="billing@nordlicht.example"),
    _DOC.format(number="INV-2043", vendor="Nordlicht GmbH", date="2026-11-09", customer="Marta Silva",
                city="Braga", items="4 monitor arms at 35.00, 2 keyboards at 60.00", total="260.00",
                due="2026-12-09", email="billing@nordlicht.example"),
    _DOC.format(number="INV-2044", vendor="Nordlicht GmbH", date="2026-11-12", customer="Joao Alves",
                city="Faro", items="3 desk lamps at 45.00", total="135.00", due="2026-12-12",
                email="billing@nordlicht.example"),
]
INVOICE_SCHEMA = {"type": "object", "properties": {
    "number": _S, "vendor": _S, "date": _S, "customer": _S, "city": _S, "total": {"type": "number"},
    "due": _S, "email": _S}, "required": ["number", "vendor", "date", "customer", "city", "total", "due", "email"]}
EXTRACT = "Extract the invoice's fields as JSON (number, vendor, date, customer, city, total, due, email).\n\n"

# group -> (system message or None, sessions: each a list of (user message, JSON schema or None))
AGENTIC = {
    "tool calls": (TOOLS, [[(t, TOOL_SCHEMA) for t in TOOL_TURNS]]),
    "code edits": (None, [[(p, None)] for p in CODE_EDITS]),
    "multi-turn chat": (None, [[(t, None) for t in s] for s in CHAT_SESSIONS]),
    "extraction": (None, [[(EXTRACT + d, INVOICE_SCHEMA)] for d in DOCUMENTS]),
}
