"""The command lines: flags made from the settings, preset files, and every program's `main`."""
