#!/bin/sh
# `meson install --destdir` into a temporary folder, then use the install as a user would: every
# file where the build's prefix and folders say; a C program built with
# `pkg-config --cflags --libs vmmshim` (PKG_CONFIG_PATH into the install) that includes vmmshim.h
# and runs under the installed library on simdev; the installed vmmctl finds the installed
# library for `vmmctl run`; both man pages render with `man -l` without a warning, and
# vmmshim(7) names every setting of the code's table.
# Usage: check_install.sh BUILD_DIR SIMDEV_DIR CUDA_INCLUDE_DIR INSTALLED_API_C SETTINGS_DOC
set -u
build=$1 simdev=$2 cuda_inc=$3 src=$4 settings_doc=$5
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
unset LD_LIBRARY_PATH LD_PRELOAD # meson test's own would find the build tree's library
failures=0
fail() {
	echo "FAIL: $*"
	failures=$((failures + 1))
}

if ! meson install -C "$build" --no-rebuild --destdir "$t/root" >"$t/install.log" 2>&1; then
	cat "$t/install.log"
	echo "FAIL: meson install"
	exit 1
fi
# The build's folders (absolute, under the prefix).
eval "$(meson introspect "$build" --buildoptions | python3 -c '
import json, os, shlex, sys
o = {x["name"]: x["value"] for x in json.load(sys.stdin)}
for k in ("prefix", "libdir", "bindir", "includedir", "mandir"):
    print(k + "=" + shlex.quote(os.path.join(o["prefix"], o[k])))
')"
root=$t/root
echo "prefix $prefix, libdir $libdir"
for f in "$libdir/libvmmshim.so" "$includedir/vmmshim.h" "$bindir/vmmctl" \
	"$libdir/pkgconfig/vmmshim.pc" "$mandir/man1/vmmctl.1" "$mandir/man7/vmmshim.7"; do
	[ -f "$root$f" ] && echo "ok: installed $f" || fail "not installed: $f"
done
outside=$(cd "$root" && find . -type f | sed 's|^\.||' | grep -v "^$prefix/")
[ -z "$outside" ] || fail "installed outside the prefix: $outside"

# pkg-config, as a user's build would call it, pointed into the staged install.
export PKG_CONFIG_PATH="$root$libdir/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$root"
flags=$(pkg-config --cflags --libs vmmshim) || fail "pkg-config --cflags --libs vmmshim"
echo "pkg-config: $flags"
case "$flags" in *-lvmmshim*) ;; *) fail "pkg-config --libs does not link libvmmshim";; esac
# shellcheck disable=SC2086 # the flags are words
if cc -std=c11 -Wall -Wextra -Werror "$src" $flags -I"$cuda_inc" -L"$simdev" -l:libcudart.so.13 \
	-o "$t/installed_api" 2>"$t/cc.log"; then
	echo "ok: compiled with pkg-config's flags"
else
	cat "$t/cc.log"
	fail "compiling against the install"
fi
if [ -x "$t/installed_api" ]; then
	export LD_LIBRARY_PATH="$root$libdir:$simdev" SIMDEV_MEMORY=1G VMMSHIM_RUN_DIR="$t/run"
	ldd "$t/installed_api" | grep -q "libvmmshim.so => $root$libdir/libvmmshim.so" ||
		fail "the program does not load the installed libvmmshim.so: $(ldd "$t/installed_api")"
	if "$t/installed_api" >"$t/api.log" 2>&1; then
		echo "ok: the program runs under the installed library ($(grep -c '^ok' "$t/api.log") checks)"
	else
		sed 's/^/    /' "$t/api.log"
		fail "the program's checks under the installed library"
	fi
	unset LD_LIBRARY_PATH
fi

# The installed vmmctl finds the installed library, wherever it is run from.
want=$(realpath "$root$libdir/libvmmshim.so")
got=$(cd / && env -u VMMSHIM_LIBRARY "$root$bindir/vmmctl" run -- sh -c 'printf %s "$LD_PRELOAD"')
[ "$got" = "$want" ] && echo "ok: installed vmmctl run preloads $got" ||
	fail "installed vmmctl run preloads '$got', expected '$want'"

# The man pages render without a warning; vmmshim(7) carries the code's settings.
for page in "$mandir/man1/vmmctl.1" "$mandir/man7/vmmshim.7"; do
	if MANWIDTH=80 man -l --warnings "$root$page" >"$t/page.txt" 2>"$t/warn.txt" &&
		[ ! -s "$t/warn.txt" ] && [ "$(wc -l <"$t/page.txt")" -gt 40 ]; then
		echo "ok: man -l $(basename "$page") renders ($(wc -l <"$t/page.txt") lines)"
	else
		fail "man -l $page: $(head -5 "$t/warn.txt")"
	fi
	cp "$t/page.txt" "$t/$(basename "$page").txt"
done
for var in $("$settings_doc" --markdown | sed -n 's/^| `\(VMMSHIM_[A-Z_]*\)`.*/\1/p'); do
	grep -q "^ *$var\$" "$t/vmmshim.7.txt" || fail "vmmshim(7) lacks the setting $var"
done
grep -q "vmmctl run" "$t/vmmctl.1.txt" || fail "vmmctl(1) does not describe run"

[ "$failures" = 0 ] && echo "check_install: all passed" && exit 0
echo "check_install: $failures failed"
exit 1
