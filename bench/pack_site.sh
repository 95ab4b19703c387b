#!/usr/bin/env bash
# Pack wheels for the device machine as one xz tarball of an unpacked site-packages folder.
#
#   bash bench/pack_site.sh WHEEL_DIR...      -> .site.tar.xz (git-ignored; carry it)
#
# A wheel's contents are already site-packages' layout, so unpacking every wheel into one
# folder is what `pip install --target` does for these (no scripts are needed). xz over the
# unpacked files is about half the size of the wheels' zip files, which lets both the
# engine's and the web path's sets fit beside the tracked tree in the 64 MiB a call
# carries. bench/on_device.sh unpacks it to /tmp/site and puts that on PYTHONPATH.
set -euo pipefail
cd "$(dirname "$0")/.."
site=$(mktemp -d)
trap 'rm -rf "$site"' EXIT
for dir in "$@"; do
    for wheel in "$dir"/*.whl; do
        python3 -m zipfile -e "$wheel" "$site"
    done
done
tar -cJf .site.tar.xz -C "$site" .
ls -l .site.tar.xz
