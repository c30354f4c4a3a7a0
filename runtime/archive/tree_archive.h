// A workspace tree as a tar archive, and back: what a snapshot holds (docs/semantics.md,
// "Snapshots"). libarchive writes and reads the pax format; the tree on either side is
// the sandbox's and treated as hostile.
//
// Packing never follows a symlink (each is stored as a link), stores only regular files,
// directories and links in sorted order with fixed owners, so that the same tree gives the
// same bytes (the fingerprint). Left out, counted and named: FIFOs, sockets, devices, and
// symlinks pointing out of the root (absolute, or climbing above it), which unpacking
// would refuse: a snapshot can always be restored. A sparse file keeps its holes (a pax
// entry with a GNU 1.0 sparse map): its data is stored, its holes are not. A file of
// several names is stored once, under its first name; its other names are hard links.
// Unpacking refuses, before writing anything of that member: absolute names, `..`,
// symlinks whose target is absolute or leads out of the root, hard links (but, in a
// snapshot, to a file the archive made before them, carrying no data), devices, FIFOs,
// duplicates, sparse maps whose data overlaps or lies past the file's end, and more
// members or bytes than the limits; it extracts with libarchive's secure flags (no write
// through a symlink, no `..`, no absolute path) into the current directory, as whoever
// runs it (the sandbox user: archive_main.cc), holes left as holes.
//
// What a file costs, on either side: a dense file its size; a sparse file the 1 KiB
// blocks its runs of data touch (ext4's smallest block), so a map of one-byte runs costs
// at least what it would cost a disk, and a sparse file never costs its snapshot more
// than it costs the sandbox's volume. Packing and checking count alike: what a sandbox's
// volume holds packs, and unpacks into a volume of the same size, within the same limits.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "isolation/sys/error.h"

namespace nsbox::snapshot {

struct ArchiveLimits {
  uint64_t max_members = 100000;
  uint64_t max_bytes = 4ull << 30;  // of file contents, holes not counted
  // Files' sizes with their holes. Holes are free on disk, but packing passes over them
  // (1 PiB in 11 ms, measured): this bounds that pass, and the sums.
  uint64_t max_apparent_bytes = 1ull << 50;
  // Runs of data in one sparse file: libarchive holds a file's map in memory (~170 bytes a
  // run, 11 MiB at this limit).
  uint64_t max_runs = 1 << 16;
};

// What is read: a snapshot (tar, pax), or an archive a caller hands to `fs:extract`
// (tar or zip), which the messages call by what it is and whose limits its request sets.
struct ArchiveSource {
  bool zip = false;
  std::string noun = "the snapshot";
  std::string raise_members = "NSBOX_SNAPSHOT_MAX_MEMBERS raises the limit";
  std::string raise_bytes = "NSBOX_SNAPSHOT_MAX_BYTES raises the limit";
  // Hard links to a file made before them: a snapshot's other names of a file. A caller's
  // archive has none (the Agents SDK refuses them at extract).
  bool hard_links = true;
};

struct ArchiveSummary {
  uint64_t members = 0;
  uint64_t bytes = 0;    // of file contents: what files cost, holes not counted (above)
  uint64_t apparent_bytes = 0;  // files' sizes, holes included
  uint64_t skipped = 0;  // packing: what was left out
  std::vector<std::string> left_out;  // the first of them, by name
  std::string sha256;    // of the archive's bytes, as written or read
};

// Packs the tree under the directory `root_fd` into `out_fd`. `skip` holds relative paths
// left out with all they contain (bucket mounts, ephemeral entries, nsbox's own dirs).
Result<ArchiveSummary> pack(int root_fd, int out_fd, const std::set<std::string>& skip, const ArchiveLimits& limits);

// Reads the whole archive and checks every member (the refusals above), writing nothing;
// rewinds it. Unpacking checks again as it goes, but only this says "nothing written".
Result<ArchiveSummary> check(int archive_fd, const ArchiveLimits& limits, const ArchiveSource& source = {});
// Unpacks `archive_fd` into the current directory; call check() first.
Result<ArchiveSummary> unpack(int archive_fd, const ArchiveLimits& limits, const ArchiveSource& source = {});

// A member's name made relative and clean ("./a//b/" -> "a/b"), or the reason it is
// refused (absolute, `..`, empty). Exposed for the unit tests.
Result<std::string> clean_member_name(const std::string& name);
// Whether a symlink at `member` pointing to `target` stays inside the root, read
// lexically (a relative target whose `..` never climb above the root). Lexical only: a
// chain through other links can resolve elsewhere; what keeps the host safe is that
// nothing on the host side follows them (packing stores links, unpacking never writes
// through one), and inside the sandbox they resolve in the sandbox's own view.
bool link_stays_inside(const std::string& member, const std::string& target);

}  // namespace nsbox::snapshot
