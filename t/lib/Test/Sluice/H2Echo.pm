package Test::Sluice::H2Echo;

# An HTTP/2 backend (cleartext, prior knowledge) that says what it got:
# it decodes each request's header blocks with a full HPACK decoder
# (static and dynamic tables, Huffman strings, RFC 7541), so it reads what
# a real client such as sluice's `h2` sends, and tells the first block
# (the fields) from a later one (the trailers). When a stream ends it
# appends one line to the log and answers 200 with the same line as the
# body; a gRPC request (content-type application/grpc) gets it as one
# length-prefixed message and `grpc-status: 0` in trailers. The line:
#   METHOD PATH body=BYTES fields=NAME: VALUE|... trailers=NAME: VALUE|...
# (the regular fields only, in the order they came; bytes outside
# printable ASCII as \xNN). One process, select()-multiplexed; DATA is
# given back to flow control as it comes. Core Perl modules only.
#
# run($port, log => FILE, ready => FILE). Also: hpack_decoder() (a
# closure: header block in, [name, value] pairs out, the dynamic table
# kept between calls, as one connection's).

use warnings;
use strict;

use IO::Socket::INET;
use IO::Select;

use Exporter qw/import/;
our @EXPORT_OK = qw/hpack_decoder/;

# RFC 7541 Appendix A.
my @STATIC = (undef, [':authority', ''], [':method', 'GET'], [':method', 'POST'],
	[':path', '/'], [':path', '/index.html'], [':scheme', 'http'], [':scheme', 'https'],
	[':status', '200'], [':status', '204'], [':status', '206'], [':status', '304'],
	[':status', '400'], [':status', '404'], [':status', '500'], ['accept-charset', ''],
	['accept-encoding', 'gzip, deflate'], map { [$_, ''] } qw/accept-language
	accept-ranges accept access-control-allow-origin age allow authorization
	cache-control content-disposition content-encoding content-language
	content-length content-location content-range content-type cookie date etag
	expect expires from host if-match if-modified-since if-none-match if-range
	if-unmodified-since last-modified link location max-forwards proxy-authenticate
	proxy-authorization range referer refresh retry-after server set-cookie
	strict-transport-security transfer-encoding user-agent vary via
	www-authenticate/);
die "hpack static table\n" unless @STATIC == 62;

# RFC 7541 Appendix B: each byte's code (hex) and its length in bits.
my $HUFFMAN = <<'CODES';
1ff8/13 7fffd8/23 fffffe2/28 fffffe3/28 fffffe4/28 fffffe5/28 fffffe6/28
fffffe7/28 fffffe8/28 ffffea/24 3ffffffc/30 fffffe9/28 fffffea/28 3ffffffd/30
fffffeb/28 fffffec/28 fffffed/28 fffffee/28 fffffef/28 ffffff0/28 ffffff1/28
ffffff2/28 3ffffffe/30 ffffff3/28 ffffff4/28 ffffff5/28 ffffff6/28 ffffff7/28
ffffff8/28 ffffff9/28 ffffffa/28 ffffffb/28 14/6 3f8/10 3f9/10 ffa/12 1ff9/13
15/6 f8/8 7fa/11 3fa/10 3fb/10 f9/8 7fb/11 fa/8 16/6 17/6 18/6 0/5 1/5 2/5 19/6
1a/6 1b/6 1c/6 1d/6 1e/6 1f/6 5c/7 fb/8 7ffc/15 20/6 ffb/12 3fc/10 1ffa/13 21/6
5d/7 5e/7 5f/7 60/7 61/7 62/7 63/7 64/7 65/7 66/7 67/7 68/7 69/7 6a/7 6b/7 6c/7
6d/7 6e/7 6f/7 70/7 71/7 72/7 fc/8 73/7 fd/8 1ffb/13 7fff0/19 1ffc/13 3ffc/14
22/6 7ffd/15 3/5 23/6 4/5 24/6 5/5 25/6 26/6 27/6 6/5 74/7 75/7 28/6 29/6 2a/6
7/5 2b/6 76/7 2c/6 8/5 9/5 2d/6 77/7 78/7 79/7 7a/7 7b/7 7ffe/15 7fc/11 3ffd/14
1ffd/13 ffffffc/28 fffe6/20 3fffd2/22 fffe7/20 fffe8/20 3fffd3/22 3fffd4/22
3fffd5/22 7fffd9/23 3fffd6/22 7fffda/23 7fffdb/23 7fffdc/23 7fffdd/23 7fffde/23
ffffeb/24 7fffdf/23 ffffec/24 ffffed/24 3fffd7/22 7fffe0/23 ffffee/24 7fffe1/23
7fffe2/23 7fffe3/23 7fffe4/23 1fffdc/21 3fffd8/22 7fffe5/23 3fffd9/22 7fffe6/23
7fffe7/23 ffffef/24 3fffda/22 1fffdd/21 fffe9/20 3fffdb/22 3fffdc/22 7fffe8/23
7fffe9/23 1fffde/21 7fffea/23 3fffdd/22 3fffde/22 fffff0/24 1fffdf/21 3fffdf/22
7fffeb/23 7fffec/23 1fffe0/21 1fffe1/21 3fffe0/22 1fffe2/21 7fffed/23 3fffe1/22
7fffee/23 7fffef/23 fffea/20 3fffe2/22 3fffe3/22 3fffe4/22 7ffff0/23 3fffe5/22
3fffe6/22 7ffff1/23 3ffffe0/26 3ffffe1/26 fffeb/20 7fff1/19 3fffe7/22 7ffff2/23
3fffe8/22 1ffffec/25 3ffffe2/26 3ffffe3/26 3ffffe4/26 7ffffde/27 7ffffdf/27
3ffffe5/26 fffff1/24 1ffffed/25 7fff2/19 1fffe3/21 3ffffe6/26 7ffffe0/27
7ffffe1/27 3ffffe7/26 7ffffe2/27 fffff2/24 1fffe4/21 1fffe5/21 3ffffe8/26
3ffffe9/26 ffffffd/28 7ffffe3/27 7ffffe4/27 7ffffe5/27 fffec/20 fffff3/24
fffed/20 1fffe6/21 3fffe9/22 1fffe7/21 1fffe8/21 7ffff3/23 3fffea/22 3fffeb/22
1ffffee/25 1ffffef/25 fffff4/24 fffff5/24 3ffffea/26 7ffff4/23 3ffffeb/26
7ffffe6/27 3ffffec/26 3ffffed/26 7ffffe7/27 7ffffe8/27 7ffffe9/27 7ffffea/27
7ffffeb/27 ffffffe/28 7ffffec/27 7ffffed/27 7ffffee/27 7ffffef/27 7fffff0/27
3ffffee/26
CODES
my %SYMBOL;
{
	my $sym = 0;
	for (split ' ', $HUFFMAN) {
		my ($code, $bits) = split m!/!;
		$SYMBOL{"$bits:" . hex $code} = $sym++;
	}
	die "hpack huffman table\n" unless $sym == 256;
}

sub huffman_decode {
	my ($bytes) = @_;
	my ($out, $code, $bits) = ('', 0, 0);
	for my $bit (split //, unpack('B*', $bytes)) {
		$code = ($code << 1) | $bit;
		$bits++;
		die "hpack: huffman code too long\n" if $bits > 30;
		if (defined(my $c = $SYMBOL{"$bits:$code"})) {
			$out .= chr $c;
			($code, $bits) = (0, 0);
		}
	}
	# What is left is padding: fewer than 8 bits, all ones.
	die "hpack: bad huffman padding\n" if $bits >= 8 || $code != (1 << $bits) - 1;
	return $out;
}

sub hpack_decoder {
	my @dynamic;
	my ($size, $max) = (0, 4096);
	my $evict = sub {
		while ($size > $max && @dynamic) {
			my $e = pop @dynamic;
			$size -= 32 + length($e->[0]) + length($e->[1]);
		}
	};
	return sub {
		my ($block) = @_;
		my $at = 0;
		my $int = sub {
			my ($prefix) = @_;
			my $mask = (1 << $prefix) - 1;
			my $n = ord(substr($block, $at++, 1)) & $mask;
			return $n if $n < $mask;
			my $shift = 0;
			while (1) {
				die "hpack: integer cut short\n" if $at >= length $block;
				my $b = ord(substr($block, $at++, 1));
				$n += ($b & 0x7f) << $shift;
				$shift += 7;
				return $n unless $b & 0x80;
			}
		};
		my $string = sub {
			my $huffman = ord(substr($block, $at, 1)) & 0x80;
			my $len = $int->(7);
			die "hpack: string cut short\n" if $at + $len > length $block;
			my $s = substr($block, $at, $len);
			$at += $len;
			return $huffman ? huffman_decode($s) : $s;
		};
		my $entry = sub {
			my ($i) = @_;
			my $e = $i <= 61 ? $STATIC[$i] : $dynamic[$i - 62];
			die "hpack: no entry $i\n" unless $i > 0 && $e;
			return @$e;
		};
		my @fields;
		while ($at < length $block) {
			my $first = ord(substr($block, $at, 1));
			if ($first & 0x80) {
				push @fields, [$entry->($int->(7))];
			} elsif (($first & 0xe0) == 0x20) {
				$max = $int->(5);
				$evict->();
			} else {
				my $indexing = ($first & 0xc0) == 0x40;
				my $i = $int->($indexing ? 6 : 4);
				my $name = $i ? ($entry->($i))[0] : $string->();
				my $value = $string->();
				push @fields, [$name, $value];
				if ($indexing) {
					unshift @dynamic, [$name, $value];
					$size += 32 + length($name) + length($value);
					$evict->();
				}
			}
		}
		return \@fields;
	};
}

sub frame {
	my ($type, $flags, $sid, $payload) = @_;
	my $len = length $payload;
	return pack('CnCCN', $len >> 16, $len & 0xffff, $type, $flags, $sid) . $payload;
}

sub literal {
	my ($n, $v) = @_;
	return pack('CC', 0, length $n) . $n . pack('C', length $v) . $v;
}

sub answer {
	my ($st, $sid) = @_;
	my %f = map { @$_ } @{$st->{fields}};
	my @regular = grep { $_->[0] !~ /^:/ } @{$st->{fields}};
	my $line = join(' ', $f{':method'} // '-', $f{':path'} // '-', "body=$st->{body}",
		'fields=' . join('|', map { "$_->[0]: $_->[1]" } @regular),
		'trailers=' . join('|', map { "$_->[0]: $_->[1]" } @{$st->{trailers} // []}));
	$line =~ s/([^\x20-\x7e])/sprintf('\\x%02x', ord $1)/ge;
	if (($f{'content-type'} // '') =~ m!^application/grpc!) {
		return ($line, frame(1, 0x4, $sid, "\x88" . literal('content-type', 'application/grpc'))
			. frame(0, 0, $sid, pack('CN', 0, length $line) . $line)
			. frame(1, 0x5, $sid, literal('grpc-status', '0')));
	}
	return ($line, frame(1, 0x4, $sid, "\x88" . literal('content-type', 'text/plain'))
		. frame(0, 0x1, $sid, $line));
}

sub run {
	my ($port, %opts) = @_;
	my $l = IO::Socket::INET->new(LocalAddr => "127.0.0.1:$port", Listen => 128,
		ReuseAddr => 1, Proto => 'tcp') or die "h2 echo backend $port: $!\n";
	if ($opts{ready}) {
		open my $fh, '>', $opts{ready} or die "h2 echo backend: $!\n";
		close $fh;
	}
	my $sel = IO::Select->new($l);
	my %conn;
	local $SIG{TERM} = sub { exit 0 };
	local $SIG{PIPE} = 'IGNORE';
	my $drop = sub {
		my ($s) = @_;
		$sel->remove($s);
		delete $conn{$s};
		close $s;
	};
	while (1) {
		SOCKET: for my $s ($sel->can_read(1)) {
			if ($s == $l) {
				my $c = $l->accept() or next;
				binmode $c;
				$sel->add($c);
				$conn{$c} = { buf => '', preface => 1, hpack => hpack_decoder(), streams => {} };
				syswrite($c, frame(4, 0, 0, ''));
				next;
			}
			my $c = $conn{$s};
			my $n = sysread($s, my $chunk, 65536);
			unless ($n) {
				$drop->($s);
				next;
			}
			$c->{buf} .= $chunk;
			if ($c->{preface}) {
				next if length $c->{buf} < 24;
				substr($c->{buf}, 0, 24) = '';
				$c->{preface} = 0;
			}
			while (length $c->{buf} >= 9) {
				my ($l1, $l2, $type, $flags, $sid) = unpack('CnCCN', $c->{buf});
				my $len = ($l1 << 16) | $l2;
				last if length $c->{buf} < 9 + $len;
				my $payload = substr($c->{buf}, 9, $len);
				substr($c->{buf}, 0, 9 + $len) = '';
				$sid &= 0x7fffffff;
				my $st = $type == 0 || $type == 1 || $type == 9
					? ($c->{streams}{$sid} //= { body => '' }) : undef;
				if (($type == 0 || $type == 1) && $flags & 0x8) {
					my $pad = ord $payload;
					$payload = substr($payload, 1, length($payload) - 1 - $pad);
				}
				my $end;
				if ($type == 4 && !($flags & 1)) {
					syswrite($s, frame(4, 1, 0, ''));
				} elsif ($type == 6 && !($flags & 1)) {
					syswrite($s, frame(6, 1, 0, $payload));
				} elsif ($type == 3) {
					delete $c->{streams}{$sid};
				} elsif ($type == 0) {
					$st->{body} .= $payload;
					$end = $flags & 1;
					syswrite($s, frame(8, 0, 0, pack('N', $len))
						. ($end ? '' : frame(8, 0, $sid, pack('N', $len)))) if $len;
				} elsif ($type == 1 || $type == 9) {
					$payload = substr($payload, 5) if $type == 1 && $flags & 0x20;
					$st->{end} = $flags & 1 if $type == 1;
					$st->{block} .= $payload;
					next unless $flags & 0x4;
					my $fields = eval { $c->{hpack}->(delete $st->{block}) };
					unless ($fields) {
						# COMPRESSION_ERROR: the connection ends.
						syswrite($s, frame(7, 0, 0, pack('NN', 0, 9)));
						$drop->($s);
						next SOCKET;
					}
					if ($st->{fields}) {
						$st->{trailers} = $fields;
					} else {
						$st->{fields} = $fields;
					}
					$end = $st->{end};
				}
				next unless $end;
				delete $c->{streams}{$sid};
				my ($line, $bytes) = answer($st, $sid);
				if (my $log = $opts{log}) {
					open my $fh, '>>', $log or die "h2 echo backend log: $!\n";
					print $fh "$line\n";
					close $fh;
				}
				syswrite($s, $bytes);
			}
		}
	}
}

1;
