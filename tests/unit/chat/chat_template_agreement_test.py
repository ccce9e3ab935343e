#!/usr/bin/env python3
"""fp4serve's chat template renderer against transformers' own, byte for byte.

Usage: chat_template_agreement_test.py <chat_template_render>

The reference is transformers' chat template environment: jinja2's ImmutableSandboxedEnvironment
with trim_blocks and lstrip_blocks, the loop controls and {% generation %} extensions, and
transformers' raise_exception, tojson and strftime_now, as transformers/utils/
chat_template_utils.py builds it. When transformers itself is installed, every reference
rendering is also checked against transformers' compiled template, so the copy cannot drift.

Three families of cases, each rendered by both sides and compared (the text when both succeed;
otherwise both must fail the same way, and a raise_exception message must be the same):
  1. the chat templates under templates/ (Llama 2/3/3.2, Mistral v0.1/v0.3, Gemma, Qwen2.5,
     Qwen3, DeepSeek-V3, MiniMax M2 and Text-01, Phi-3, Zephyr, ChatML) with a table of
     conversations, with and without the generation prompt and tools;
  2. small templates exercising one expression, filter, test or method each;
  3. random templates mixing text with every tag form and whitespace-control sign, random
     expressions, and random conversations through the real templates. Random cases use a fresh seed each run (printed;
     FP4_TEST_SEED=<seed> replays it).
"""
import json
import os
import pathlib
import random
import subprocess
import sys
import warnings
from datetime import datetime

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

from chat_template_cases import CONVERSATIONS, SNIPPETS, SNIPPET_VARS, TOOLS, TRICKY_TEXTS

HERE = pathlib.Path(__file__).resolve().parent
# Jinja compiles templates such as {{ 1[:2] }} to Python that CPython warns about; noise here.
warnings.filterwarnings("ignore", category=SyntaxWarning)
NOW = 1718000000  # 2024-06-10, fixed so strftime_now renders the same on both sides
BOS, EOS = "<s>", "</s>"

try:
    import transformers.utils.chat_template_utils as transformers_templates
except Exception:  # transformers is optional: the copy below is the reference either way
    transformers_templates = None


class GenerationTag(jinja2.ext.Extension):
    """transformers' AssistantTracker without the tracking: {% generation %} renders its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    @jinja2.pass_eval_context
    def _generation_support(self, context, caller):
        return caller()


def reference_environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.fromtimestamp(NOW).strftime(format)

    class TemplateNamespace(jinja2.utils.Namespace):
        def __init__(*args, **kwargs):
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                if isinstance(name, str) and name.startswith("_"):
                    raise jinja2.exceptions.SecurityError(f"underscore-prefixed attribute {name!r}")
            jinja2.utils.Namespace.__init__(self, attrs)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.globals["dict"] = dict
    env.globals["namespace"] = TemplateNamespace
    return env


ENV = reference_environment()


class FixedClock(datetime):
    @classmethod
    def now(cls, tz=None):
        return datetime.fromtimestamp(NOW, tz)


def render_with(compile_template, request):
    try:
        template = compile_template(request["template"])
    except Exception as e:
        return {"ok": False, "kind": "syntax", "message": f"{type(e).__name__}: {e}"}
    variables = {"messages": request["messages"], "tools": request.get("tools"), "documents": None,
                 "add_generation_prompt": request["add_generation_prompt"]}
    for key in ("bos_token", "eos_token"):
        if key in request:
            variables[key] = request[key]
    variables.update(request.get("extra", {}))
    try:
        return {"ok": True, "text": template.render(**variables)}
    except jinja2.exceptions.TemplateError as e:
        if type(e) is jinja2.exceptions.TemplateError:
            return {"ok": False, "kind": "raised", "message": str(e)}
        return {"ok": False, "kind": "error", "message": f"{type(e).__name__}: {e}"}
    except Exception as e:
        return {"ok": False, "kind": "error", "message": f"{type(e).__name__}: {e}"}


def reference(request):
    expected = render_with(ENV.from_string, request)
    if transformers_templates is not None:
        transformers_templates.datetime = FixedClock
        theirs = render_with(transformers_templates._compile_jinja_template, request)
        if expected.get("text") != theirs.get("text") or expected.get("kind") != theirs.get("kind"):
            raise AssertionError(f"the reference copy disagrees with transformers on {request!r}:\n"
                                 f"  copy:         {expected!r}\n  transformers: {theirs!r}")
    return expected


def as_content_format(messages, content_format):
    """The messages as fp4serve hands them to the template: list content joined for "string"."""
    if content_format != "string":
        return messages
    out = []
    for m in messages:
        if isinstance(m.get("content"), list):
            m = dict(m, content="\n".join(part["text"] for part in m["content"]))
        out.append(m)
    return out


class Renderer:
    def __init__(self, tool):
        self.proc = subprocess.Popen([tool, "--batch"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, encoding="utf-8")

    def render(self, request):
        self.proc.stdin.write(json.dumps(request, ensure_ascii=False) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("chat_template_render exited")
        return json.loads(line)

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


class Checker:
    def __init__(self, renderer):
        self.renderer = renderer
        self.passed = 0
        self.failures = []
        self.outcomes = {"ok": 0, "raised": 0, "error": 0, "syntax": 0}

    def check(self, name, request):
        request = dict(request, now=NOW)
        ours = self.renderer.render(request)
        ref_request = dict(request)
        if ours.get("ok"):
            ref_request["messages"] = as_content_format(request["messages"], ours["content_format"])
        elif "content_format" in request:
            ref_request["messages"] = as_content_format(request["messages"], request["content_format"])
        expected = reference(ref_request)
        same = ours["ok"] == expected["ok"] and (
            ours.get("text") == expected.get("text") if ours["ok"] else
            ours["kind"] == expected["kind"] and (ours["kind"] != "raised" or ours["message"] == expected["message"]))
        if same:
            self.passed += 1
            self.outcomes["ok" if ours["ok"] else ours["kind"]] += 1
        else:
            self.failures.append(name)
            if len(self.failures) <= 25:
                print(f"FAIL {name}\n  template: {request['template'][:300]!r}\n"
                      f"  expected: {expected!r}\n  fp4serve: {ours!r}")

    def finish(self):
        print(f"outcomes of the agreeing cases: {self.outcomes}")
        print(f"{self.passed} passed, {len(self.failures)} failed")
        return 0 if not self.failures else 1


def template_cases(checker):
    templates = sorted(HERE.glob("templates/*.jinja"))
    assert len(templates) >= 8, templates
    for path in templates:
        source = path.read_text(encoding="utf-8")
        for conv_name, conv in CONVERSATIONS.items():
            for add_generation_prompt in (True, False):
                for tools in (None, TOOLS):
                    if tools is not None and not conv.get("tools_too"):
                        continue
                    request = {"template": source, "messages": conv["messages"],
                               "add_generation_prompt": add_generation_prompt, "bos_token": BOS,
                               "eos_token": EOS, "extra": conv.get("extra", {})}
                    if tools is not None:
                        request["tools"] = tools
                    checker.check(f"{path.stem}/{conv_name}/gen={add_generation_prompt}/tools={tools is not None}",
                                  request)


def snippet_cases(checker):
    for i, source in enumerate(SNIPPETS):
        checker.check(f"snippet[{i}]", {"template": source, "messages": [], "add_generation_prompt": False,
                                        "extra": SNIPPET_VARS})


def random_tag_template(rng, depth=0):
    def sign(options=("", "-", "+")):
        return rng.choice(options)

    pieces = []
    for _ in range(rng.randint(1, 6)):
        kind = rng.randrange(8 if depth < 3 else 5)
        if kind <= 1:
            pieces.append(rng.choice(["a", " ", "  ", "\t", "\n", " \n", "\n  ", "x y", "\n\n", "\r\n", " \t \n\t"]))
        elif kind == 2:
            pieces.append("{{" + sign() + rng.choice([" 'v' ", "'w'", " z "]) + sign(("", "-")) + "}}")
        elif kind == 3:
            pieces.append("{#" + sign() + rng.choice([" c ", "", "\n"]) + sign() + "#}")
        elif kind == 4:
            pieces.append("{%" + sign() + " set z = 1 " + sign() + "%}")
        elif kind == 5:
            pieces.append("{%" + sign() + " if true " + sign() + "%}" + random_tag_template(rng, depth + 1) +
                          "{%" + sign() + " else " + sign() + "%}" + random_tag_template(rng, depth + 1) +
                          "{%" + sign() + " endif " + sign() + "%}")
        elif kind == 6:
            pieces.append("{%" + sign() + " for i in [1, 2] " + sign() + "%}" + random_tag_template(rng, depth + 1) +
                          "{%" + sign() + " endfor " + sign() + "%}")
        else:
            pieces.append("{%" + sign() + " raw " + sign(("", "-")) + "%}" + rng.choice([" {{ x }} ", "\n a\n", ""]) +
                          "{%" + sign() + " endraw " + sign() + "%}")
    return "".join(pieces)


def random_expression(rng, depth=0):
    """An expression over SNIPPET_VARS; Python-only behaviours (printing generators and bound
    methods, big integers) are left out, since those are documented differences."""
    if depth >= 3 or rng.random() < 0.25:
        return rng.choice(["0", "1", "2", "-3", "7", "0.5", "2.0", "-1.5", "'a'", "'Ab c'", "''", "' x '", "'é'",
                           "n", "f", "s", "l", "d", "e", "t", "fl", "nothing", "undefined_name", "words", "none",
                           "true", "[1, 'b']", "[]", "{'k': 1}", "(1, 2)"])
    sub = lambda: random_expression(rng, depth + 1)  # noqa: E731
    kind = rng.randrange(10)
    if kind == 0:
        return f"({rng.choice(['-', 'not ', '+'])}{sub()})"
    if kind <= 2:
        op = rng.choice(["+", "-", "*", "/", "//", "%", "~", "and", "or", "==", "!=", "<", ">", "<=", ">=", "in",
                         "not in"])
        return f"({sub()} {op} {sub()})"
    if kind == 3:
        return f"({sub()} ** {rng.randrange(3)})"
    if kind == 4:
        return f"({sub()} if {sub()} else {sub()})"
    if kind == 5:
        # Jinja folds a slice of constants at compile time, turning its TypeError into Undefined
        # (a quirk of its optimizer that fp4serve does not copy), so slices take a variable.
        var = rng.choice(["s", "l", "n", "words", "d", "t", "f", "nothing", "e"])
        seq = rng.choice([var, f"({var}|list)", f"({var} ~ {sub()})", f"({var} + {sub()})"])
        return rng.choice([f"{seq}[{rng.randrange(-3, 4)}]", f"{seq}[{rng.randrange(-2, 3)}:]",
                           f"{seq}[:{rng.randrange(-2, 3)}]", f"{seq}[::-1]", f"{seq}['k']"])
    if kind == 6:
        return f"{sub()}.{rng.choice(['strip()', 'upper()', 'lower()', 'split()', 'title()', 'items()', 'keys()'])}"
    if kind == 7:
        test = rng.choice(["defined", "undefined", "none", "string", "number", "odd", "even", "mapping", "iterable",
                           "sequence", "integer", "float", "boolean", "true", "false", "divisibleby 2", "in l",
                           "eq 1"])
        return f"({sub()} is {rng.choice(['', 'not '])}{test})"
    flt = rng.choice(["length", "upper", "lower", "trim", "first", "last", "string", "int", "list", "tojson",
                      "join(',')", "default('d')", "reverse|list", "sort", "unique|list", "abs", "capitalize",
                      "title", "float", "items|list", "select|list", "reject('odd')|list", "map('string')|list",
                      "sum", "max", "min", "tojson(indent=1)", "replace('a', 'b')", "trim('a')", "count"])
    return f"({sub()}|{flt})"


def random_conversation(rng):
    roles = ["system", "user", "assistant", "tool"]
    messages = []
    for _ in range(rng.randint(0, 7)):
        role = rng.choices(roles, weights=[1, 4, 4, 1])[0]
        content = "".join(rng.choice(TRICKY_TEXTS) for _ in range(rng.randint(0, 3)))
        messages.append({"role": role, "content": content})
    return messages


def random_cases(checker, seed):
    rng = random.Random(seed)
    for i in range(600):
        source = random_tag_template(rng)
        checker.check(f"random_tags[{i}]", {"template": source, "messages": [], "add_generation_prompt": False,
                                            "extra": {"z": "Z"}})
    for i in range(800):
        expression = random_expression(rng)
        checker.check(f"random_expression[{i}]", {"template": "{{ " + expression + " }}", "messages": [],
                                                  "add_generation_prompt": False, "extra": SNIPPET_VARS})
    templates = sorted(HERE.glob("templates/*.jinja"))
    for i in range(300):
        path = rng.choice(templates)
        checker.check(f"random_conversation[{i}]/{path.stem}",
                      {"template": path.read_text(encoding="utf-8"), "messages": random_conversation(rng),
                       "add_generation_prompt": rng.random() < 0.5, "bos_token": BOS, "eos_token": EOS})


def main(tool):
    seed = int(os.environ.get("FP4_TEST_SEED", random.randrange(1 << 30)))
    print(f"seed {seed} (FP4_TEST_SEED={seed} replays the random cases)")
    print(f"reference: jinja2 {jinja2.__version__} with transformers' environment"
          + (", checked against transformers' own" if transformers_templates else ""))
    renderer = Renderer(tool)
    checker = Checker(renderer)
    try:
        template_cases(checker)
        snippet_cases(checker)
        random_cases(checker, seed)
    finally:
        renderer.close()
    return checker.finish()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
