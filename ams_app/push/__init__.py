"""Push delivery: workers that hand each push subscription's messages to its endpoint.

``pacing`` spaces the requests of one subscription (its retry policy) and of one worker (a rate
limit); ``http`` sends the requests; ``coordination`` decides which worker owns which
subscription; ``worker`` runs one delivery loop per owned subscription.
"""
