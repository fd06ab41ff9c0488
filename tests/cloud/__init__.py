"""Tests of the Vertex AI deployment (launch/cloud/)."""
