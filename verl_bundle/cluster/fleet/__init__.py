"""The fleet report (report.py): every node's result (results.py), the expected nodes (hostlist.py), checked and compared."""
