"""Chaos runs on the local stack (``make chaos``): a mixed load of every example under real faults, then the
invariants checked and the figures measured from what the stack recorded.

- :mod:`.config`: the two profiles (``faults``, ``backlog``) and the goals;
- :mod:`.catalog`: the examples as the run drives them (inputs, operator scripts, expected ends, crash sites);
- :mod:`.plan`: the seeded load plan;
- :mod:`.inject`: worker, sweeper and control-plane kills, duplicated and replayed messages;
- :mod:`.actions`: the operator (cancels, wakes, redrives, events, callbacks, repeated starts) via the SDK;
- :mod:`.driver`: one run on a running stack, and its record;
- :mod:`.observe`: what the stack recorded (invocations, step bodies, logs, the ledger);
- :mod:`.invariants`: the checks; :mod:`.figures`: the numbers; :mod:`.report`: both as text;
- :mod:`.session`: a fresh stack for ``make chaos``; ``python -m loom_local.chaos`` its command line.
"""
