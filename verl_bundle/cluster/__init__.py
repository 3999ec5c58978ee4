"""Installing and checking many nodes through the engines clusters already run: Slurm
(slurm.py) and Ansible; scripts written from templates/, never an SSH fan-out of our own."""
