package Test::Sluice::H2;

# A minimal HTTP/2 client over a plain socket, for what curl and h2load
# cannot do: reset a stream mid-response, flood a connection with streams
# it resets at once, and see which frames came. Requests are HPACK
# literals without indexing (no table state); frames are read raw. Core
# Perl modules only.

use warnings;
use strict;

use IO::Socket::INET;
use IO::Select;
use Time::HiRes qw/time/;

use Exporter qw/import/;
our @EXPORT_OK = qw/h2_connect h2_request h2_rst h2_frames h2_data_of h2_block h2_status
	h2_close/;

our %TYPE = (0 => 'DATA', 1 => 'HEADERS', 3 => 'RST_STREAM', 4 => 'SETTINGS',
	6 => 'PING', 7 => 'GOAWAY', 8 => 'WINDOW_UPDATE');

my %BUF;

sub frame {
	my ($type, $flags, $sid, $payload) = @_;
	my $len = length $payload;
	return pack('CnCCN', $len >> 16, $len & 0xffff, $type, $flags, $sid) . $payload;
}

# Connects, sends the preface and empty SETTINGS (and a large connection
# window when asked: window => BYTES).
sub h2_connect {
	my ($port, %opts) = @_;
	my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$port", Proto => 'tcp')
		or die "h2 connect: $!\n";
	binmode $s;
	my $out = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" . frame(4, 0, 0, '');
	$out .= frame(8, 0, 0, pack('N', $opts{window})) if $opts{window};
	syswrite($s, $out);
	return $s;
}

sub literal {
	my ($n, $v) = @_;
	die "h2: field too long\n" if length($n) > 126 || length($v) > 126;
	return pack('CC', 0, length $n) . $n . pack('C', length $v) . $v;
}

# A header block of [name, value] pairs, each a literal without indexing
# (new name, no Huffman), of any length (HPACK integers, RFC 7541 5.1).
sub h2_block {
	my $int = sub {
		my ($n) = @_;
		return pack('C', $n) if $n < 127;
		my $b = pack('C', 127);
		for ($n -= 127; $n >= 128; $n >>= 7) {
			$b .= pack('C', 0x80 | ($n & 0x7f));
		}
		return $b . pack('C', $n);
	};
	return join '', map {
		"\0" . $int->(length $_->[0]) . $_->[0] . $int->(length $_->[1]) . $_->[1]
	} @_;
}

# The :status a response's first header block starts with (HPACK, RFC
# 7541): one of the static table's (0x88 200 ... 0x8e 500), or a literal
# whose name is the table's :status, its three digits in plain or Huffman
# code (digits 0-2 are five bits, 3-9 six); 'unknown' else.
sub h2_status {
	my ($block) = @_;
	my %indexed = (0x88 => 200, 0x89 => 204, 0x8a => 206, 0x8b => 304,
		0x8c => 400, 0x8d => 404, 0x8e => 500);
	my ($first, $len) = unpack('CC', $block);
	return 'unknown' unless defined $first;
	return $indexed{$first} if $indexed{$first};
	return 'unknown' unless ($first & 0xe0) == 0 && ($first & 0x0f) == 8
		|| ($first & 0xc0) == 0x40 && ($first & 0x3f) == 8;
	my $value = substr($block, 2, $len & 0x7f);
	return $value unless $len & 0x80;
	my $bits = unpack('B*', $value);
	my $digits = '';
	while (length($digits) < 3 && length $bits >= 5) {
		my $five = oct('0b' . substr($bits, 0, 5));
		if ($five <= 2) {
			$digits .= $five;
			substr($bits, 0, 5) = '';
		} else {
			$digits .= oct('0b' . substr($bits, 0, 6)) - 0x19 + 3;
			substr($bits, 0, 6) = '';
		}
	}
	return $digits;
}

# Opens stream $sid with a GET (or method => M) of $path; end => 0 leaves
# the stream open for a body. Returns the bytes (so that a caller can
# batch), or sends them when $s is given.
sub h2_request {
	my ($s, $sid, $path, %opts) = @_;
	my $block = literal(':method', $opts{method} // 'GET')
		. literal(':scheme', 'http') . literal(':path', $path)
		. literal(':authority', 'localhost');
	my $flags = 0x4 | (($opts{end} // 1) ? 0x1 : 0);
	my $f = frame(1, $flags, $sid, $block);
	syswrite($s, $f) if $s;
	return $f;
}

# RST_STREAM on $sid with $code, CANCEL (8) unless given.
sub h2_rst {
	my ($s, $sid, $code) = @_;
	my $f = frame(3, 0, $sid, pack('N', $code // 8));
	syswrite($s, $f) if $s;
	return $f;
}

# Reads frames until $until->(frame) is true, the peer closes, or $secs
# pass; answers SETTINGS with an ACK. Returns the frames as hashes
# (type, flags, sid, payload), and whether the peer closed.
sub h2_frames {
	my ($s, $until, $secs) = @_;
	# Bytes read past the frame that ended the last call stay for the next.
	my $buf = delete $BUF{$s} // '';
	my (@frames, $closed);
	my $sel = IO::Select->new($s);
	my $end = time() + ($secs // 5);
	while (time() < $end) {
		while (length $buf >= 9) {
			my ($l1, $l2, $type, $flags, $sid) = unpack('CnCCN', $buf);
			my $len = ($l1 << 16) | $l2;
			last if length $buf < 9 + $len;
			my $f = { type => $TYPE{$type} // $type, flags => $flags,
				sid => $sid & 0x7fffffff, payload => substr($buf, 9, $len) };
			substr($buf, 0, 9 + $len) = '';
			push @frames, $f;
			syswrite($s, frame(4, 1, 0, '')) if $type == 4 && !($flags & 1);
			if ($until && $until->($f)) {
				$BUF{$s} = $buf;
				return (\@frames, 0);
			}
		}
		last unless $sel->can_read($end - time());
		my $n = sysread($s, my $chunk, 65536);
		unless ($n) {
			$closed = 1;
			last;
		}
		$buf .= $chunk;
	}
	return (\@frames, $closed);
}

# Closes $s and forgets the bytes h2_frames read past its last frame (a
# later socket may get the same address, the key they are kept by).
sub h2_close {
	my ($s) = @_;
	delete $BUF{$s};
	close $s;
}

# The DATA bytes frames carry on stream $sid.
sub h2_data_of {
	my ($frames, $sid) = @_;
	return join '', map { $_->{payload} } grep { $_->{type} eq 'DATA' && $_->{sid} == $sid } @$frames;
}

1;
