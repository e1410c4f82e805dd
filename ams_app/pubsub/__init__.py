"""Google's Pub/Sub v1 gRPC API (``google.pubsub.v1``) on the AMS service (docs/pubsub.md).

The second door to the same objects: a topic made over REST is published to over gRPC, and a
subscription is consumed over either. Each RPC authenticates as a REST route does and is allowed
to the roles that the equivalent route declares (``ams_app/api/<resource>.py``); the rules are the
service's (``ams_app/service/``), and the request shapes are read by the same parsers.

- calls.py: who calls (metadata tokens, emulator mode), the role check, AMS errors as gRPC status
- convert.py: resource names; AMS records as Pub/Sub messages, and Pub/Sub requests as the
  service's requests
- owned.py: pull, acknowledge and deadlines at the subscription's owner (consume_owner)
- publisher.py, subscriber.py, streaming.py (StreamingPull), schema_service.py, iam.py
- server.py: the listener inside ``ams serve``
"""
