"""The tally every Python test script keeps: check() counts a condition that held and prints one
that did not, summary() prints the count and returns the script's exit status."""
failures = []
passed = 0


def check(cond, what):
    global passed
    if cond:
        passed += 1
    else:
        failures.append(what)
        print("FAIL:", what, flush=True)


def summary(name=None):
    """Lists the failures again (a long log scrolls them away), then the count; 1 if any."""
    for f in failures:
        print("FAILED:", f)
    print(f"{name + ': ' if name else ''}{passed} checks passed, {len(failures)} failed", flush=True)
    return 1 if failures else 0
