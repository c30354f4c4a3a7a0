// libarchive's readers, writers and entries, owned: freed however the code leaves.
#pragma once

#include <archive.h>
#include <archive_entry.h>

#include <memory>

namespace nsbox::archive_handles {

struct WriterDeleter {
  void operator()(archive* a) const { archive_write_free(a); }
};
struct ReaderDeleter {
  void operator()(archive* a) const { archive_read_free(a); }
};
struct EntryDeleter {
  void operator()(archive_entry* e) const { archive_entry_free(e); }
};
using Writer = std::unique_ptr<archive, WriterDeleter>;
using Reader = std::unique_ptr<archive, ReaderDeleter>;
using Entry = std::unique_ptr<archive_entry, EntryDeleter>;

}  // namespace nsbox::archive_handles
