// TensorBoard event files ("tfevents"): the record framing and the few Event messages bigbatch
// writes (file version, scalar summaries, a session start on resume).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace bigbatch::metrics {

/// One scalar of a summary: TensorBoard's Summary.Value with `tag` and `simple_value`.
struct Scalar {
  std::string tag;     ///< e.g. "train/loss"; '/' groups charts in TensorBoard
  double value = 0.0;  ///< stored as float32 (simple_value)
};

/// CRC-32C (Castagnoli) of `data`, computed by Intel's ISA-L (crc32_iscsi).
uint32_t crc32c(std::string_view data);

/// The masked CRC-32C of TFRecord framing: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t masked_crc32c(std::string_view data);

/// One record of an event file: the length as little-endian uint64, the masked CRC-32C of those
/// 8 bytes, `data`, the masked CRC-32C of `data`.
std::string tfevents_record(std::string_view data);

/// The serialized Event that opens every event file: wall_time and file_version "brain.Event:2".
std::string file_version_event(double wall_time);

/// A serialized Event with wall_time, step and a Summary of one Value per scalar.
std::string scalars_event(double wall_time, int64_t step, const std::vector<Scalar>& scalars);

/// A serialized Event with SessionLog status START at `step`: TensorBoard drops the events of
/// earlier files with a step >= `step` (they were trained again after a restart).
std::string session_start_event(double wall_time, int64_t step);

/// Seconds since the Unix epoch, with a fraction: an Event's wall_time.
double wall_time_now();

/// Appends events to a new file `events.out.tfevents.<unix time>.<hostname>` in a directory (with
/// ".2", ".3", ... appended if that name exists), first the file-version event. Every event is
/// written with one write(2) as it comes, so TensorBoard sees it at once and a crash loses at most
/// the record being written. Usage:
///   EventFileWriter events(run_dir);
///   events.write(scalars_event(wall_time_now(), step, {{"train/loss", 2.5}}));
class EventFileWriter {
 public:
  /// Creates the file in `directory` (which must exist) and writes the file-version event.
  /// Throws std::runtime_error naming the path and the system error.
  explicit EventFileWriter(const std::string& directory);
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  /// Appends one serialized Event as a record. Throws std::runtime_error naming the file and the
  /// system error (a full disk, for example).
  void write(std::string_view event);
  /// The file's path.
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace bigbatch::metrics
