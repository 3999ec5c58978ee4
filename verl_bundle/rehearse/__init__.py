"""The rehearsal: a bundle's install.sh run here with the network cut."""
