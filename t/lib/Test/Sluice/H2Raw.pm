package Test::Sluice::H2Raw;

# A scripted HTTP/2 backend (cleartext, prior knowledge) for hostile-input
# tests: it answers every request with raw frames the test makes, so a
# test can send what no well-behaved server would (an HPACK bomb, names in
# upper case, frames where they may not be, a GOAWAY instead of an answer).
# One process, select()-multiplexed, as many connections as come.
#
# run($port, answer => BYTES | sub { ($sid, $conn) -> BYTES }, close => 1,
#     log => FILE, ready => FILE): it sends its SETTINGS (none changed) on
# accepting, acknowledges the client's SETTINGS and PINGs, and answers each
# complete HEADERS frame with the answer's frames for that stream (with
# close => 1 it then closes the connection). Each request is appended to
# the log as "CONN SID", CONN numbering the connections accepted.
#
# Helpers to write answers: frame(TYPE, FLAGS, SID, PAYLOAD) and hpack
# literals without indexing (field(NAME, VALUE)), with incremental indexing
# (indexed_field(NAME, VALUE)); any length.

use warnings;
use strict;

use IO::Socket::INET;
use IO::Select;

use Exporter qw/import/;
our @EXPORT_OK = qw/frame field indexed_field/;

sub frame {
	my ($type, $flags, $sid, $payload) = @_;
	my $len = length $payload;
	return pack('CnCCN', $len >> 16, $len & 0xffff, $type, $flags, $sid) . $payload;
}

# An HPACK integer with an N-bit prefix, the prefix's other bits in $first.
sub int_prefixed {
	my ($n, $bits, $first) = @_;
	my $max = (1 << $bits) - 1;
	return pack('C', $first | $n) if $n < $max;
	my $out = pack('C', $first | $max);
	$n -= $max;
	while ($n >= 128) {
		$out .= pack('C', ($n % 128) | 0x80);
		$n = int($n / 128);
	}
	return $out . pack('C', $n);
}

sub string { int_prefixed(length $_[0], 7, 0) . $_[0] }

sub field { "\x00" . string($_[0]) . string($_[1]) }

sub indexed_field { "\x40" . string($_[0]) . string($_[1]) }

sub run {
	my ($port, %opts) = @_;
	my $answer = $opts{answer} // '';
	my $l = IO::Socket::INET->new(LocalAddr => "127.0.0.1:$port", Listen => 128,
		ReuseAddr => 1, Proto => 'tcp') or die "h2 raw backend $port: $!\n";
	if ($opts{ready}) {
		open my $fh, '>', $opts{ready} or die "h2 raw backend: $!\n";
		close $fh;
	}
	my $sel = IO::Select->new($l);
	my (%buf, %id, %preface);
	my $accepted = 0;
	local $SIG{TERM} = sub { exit 0 };
	local $SIG{PIPE} = 'IGNORE';
	my $drop = sub {
		my ($s) = @_;
		$sel->remove($s);
		delete $buf{$s};
		close $s;
	};
	while (1) {
		for my $s ($sel->can_read(1)) {
			if ($s == $l) {
				my $c = $l->accept() or next;
				binmode $c;
				$sel->add($c);
				$buf{$c} = '';
				$preface{$c} = 1;
				$id{$c} = ++$accepted;
				syswrite($c, frame(4, 0, 0, ''));
				next;
			}
			my $n = sysread($s, my $chunk, 65536);
			unless ($n) {
				$drop->($s);
				next;
			}
			$buf{$s} .= $chunk;
			if ($preface{$s}) {
				next if length $buf{$s} < 24;
				substr($buf{$s}, 0, 24) = '';
				$preface{$s} = 0;
			}
			while (length $buf{$s} >= 9) {
				my ($l1, $l2, $type, $flags, $sid) = unpack('CnCCN', $buf{$s});
				my $len = ($l1 << 16) | $l2;
				last if length $buf{$s} < 9 + $len;
				my $payload = substr($buf{$s}, 9, $len);
				substr($buf{$s}, 0, 9 + $len) = '';
				$sid &= 0x7fffffff;
				if ($type == 4 && !($flags & 1)) {
					syswrite($s, frame(4, 1, 0, ''));
				} elsif ($type == 6 && !($flags & 1)) {
					syswrite($s, frame(6, 1, 0, $payload));
				} elsif ($type == 1 && $flags & 4) {
					if (my $log = $opts{log}) {
						open my $fh, '>>', $log or die "h2 raw backend log: $!\n";
						print $fh "$id{$s} $sid\n";
						close $fh;
					}
					my $out = ref $answer eq 'CODE' ? $answer->($sid, $id{$s}) : $answer;
					# Blocking while it goes: the client reads its connection.
					$s->blocking(1);
					syswrite($s, $out) if length $out;
					if ($opts{close}) {
						$drop->($s);
						last;
					}
				}
			}
		}
	}
}

1;
