"""``ams republish CONFIG``: consume one subscription, republish each message to a topic chosen
from a routing value (an attribute, or a field of the JSON payload).

A client of the AMS HTTP API, nothing more (docs/republisher.md). Three parts, kept apart:

- config.py: YAML in, a checked ``Config`` out (``load_config``);
- routing.py: the routing decision, a pure function of one message (``route``);
- loop.py: the I/O loop (``Republisher``) over transport.py's HTTP: pull a batch, publish it
  grouped per target topic, acknowledge it only when every message of it is republished. At
  least once: a crash anywhere loses nothing and duplicates at most the batch in flight.
"""
