"""Vertex AI deployment: the cloud block of a run config, the placement of
node groups on worker pools, the CustomJob request, the replica entrypoint and
the local run of the same job (vertex_local). docs/deployment.md is the
recipe."""
