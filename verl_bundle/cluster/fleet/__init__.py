"""The fleet report (report.py): every node's result (results.py), the expected nodes (hostlist.py), each node's standing (standing.py) and the drift among them (drift.py)."""
