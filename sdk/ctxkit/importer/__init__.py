"""``ctxkit import``: the sessions agents keep on disk, sent to ctxview as manifests.

``sessions`` reads each agent's transcripts (through its module in ``ctxkit.agents``) and sends
each model call through the proxy's mapping; ``options`` is the command line.
"""
