"""Make `snakemake --profile slurm` work as typed at the repository root.

Snakemake 9 looks for a profile NAME only as ./NAME or under its user config directory
(~/.config/snakemake/NAME); it reads profiles/default by itself but not profiles/slurm. The
top level of this repository is fixed, so the profile is linked into the user config directory.
"""

from __future__ import annotations

from pathlib import Path


def user_profile_dir() -> Path:
    """Where Snakemake looks for named profiles (platformdirs' user config dir, as Snakemake computes it)."""
    from snakemake.common import get_appdirs

    return Path(get_appdirs().user_config_dir)


def install_profile(repo: Path, name: str = "slurm") -> str:
    """Symlink repo/profiles/NAME into Snakemake's profile directory; refuse to replace another profile."""
    source = (repo / "profiles" / name).resolve()
    if not (source / "profile.yaml").exists():
        raise SystemExit(f"no profile at {source} (expected {source / 'profile.yaml'})")
    target = user_profile_dir() / name
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.is_symlink() or target.exists():
        if target.resolve() == source:
            return f"profile {name!r} already installed: {target} -> {source}"
        if not target.is_symlink():
            raise SystemExit(
                f"{target} exists and is not a link to {source}; move it away or use "
                f"`snakemake --profile {repo / 'profiles' / name}`"
            )
        target.unlink()  # a link to an older checkout: point it here
    target.symlink_to(source, target_is_directory=True)
    return f"installed profile {name!r}: {target} -> {source}"
