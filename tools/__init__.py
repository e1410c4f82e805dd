"""The project's own tools: local servers (services.py) and a cluster of AMS nodes on them
(cluster.py), the Molecule image (image.py), what the roles install (artifacts.py), a Spark cluster
(spark_cluster.py), the Molecule runner (molecule_run.py), AuthN on one machine (authn_demo.py,
pki.py), and what they share (toolkit.py). Run each from the repository's root as
``python -m tools.<name>`` (the Makefile's targets do)."""
