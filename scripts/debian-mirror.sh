# debian-mirror.sh defines debian_mirror, sourced by compose-smoke.sh (and
# its Go test): the Debian mirror this machine's apt uses, so debootstrap
# reaches what the machine reaches.
#
# debian_mirror [ROOT] prints the first non-security mirror on stdout and,
# on stderr, which file it came from and in which format: deb822 files
# (/etc/apt/sources.list.d/*.sources, "URIs:" fields, the only form on a
# fresh Debian 12) first, then one-line sources (/etc/apt/sources.list and
# /etc/apt/sources.list.d/*.list, "deb URI suite ..."). With neither it
# says so on stderr and returns 1. It is safe under set -euo pipefail: a
# missing file or a format with no match is not an error. ROOT (default /)
# lets a test point it at a directory of its own.
debian_mirror() {
  local root=${1:-} f uri
  local dir=$root/etc/apt/sources.list.d
  for f in "$dir"/*.sources; do
    [ -f "$f" ] || continue
    # deb822: "URIs: a b" may list several; a stanza may be disabled with
    # "Enabled: no". Security archives have their own suites and are not
    # full mirrors.
    uri=$(awk '
      function flush() { if (uri != "" && enabled) { print uri; found = 1; exit } uri = ""; enabled = 1 }
      BEGIN { enabled = 1 }
      /^[ \t]*$/ { flush(); next }
      tolower($1) == "enabled:" && tolower($2) == "no" { enabled = 0 }
      tolower($1) == "uris:" && uri == "" { for (i = 2; i <= NF; i++) if ($i !~ /security/) { uri = $i; break } }
      END { if (!found && uri != "" && enabled) print uri }
    ' "$f" || true)
    if [ -n "$uri" ]; then
      printf 'debian mirror: %s (deb822 sources file %s)\n' "$uri" "$f" >&2
      printf '%s\n' "$uri"
      return 0
    fi
  done
  for f in "$root/etc/apt/sources.list" "$dir"/*.list; do
    [ -f "$f" ] || continue
    # One-line form: "deb [options] URI suite components"; the options
    # in brackets may hold spaces.
    uri=$(sed -e 's/#.*//' -e 's/\[[^]]*\]//' "$f" | awk '$1 == "deb" && $2 !~ /security/ { print $2; exit }' || true)
    if [ -n "$uri" ]; then
      printf 'debian mirror: %s (one-line sources file %s)\n' "$uri" "$f" >&2
      printf '%s\n' "$uri"
      return 0
    fi
  done
  printf 'debian mirror: none found: no "URIs:" in %s/*.sources (deb822) and no "deb" line in %s/etc/apt/sources.list or %s/*.list; set DEBIAN_MIRROR to one, e.g. DEBIAN_MIRROR=http://deb.debian.org/debian\n' "$dir" "$root" "$dir" >&2
  return 1
}
