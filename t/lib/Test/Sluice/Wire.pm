package Test::Sluice::Wire;

# A raw HTTP/1 client for framing tests: it sends exact bytes (in parts, with
# pauses between them), reads the answers as a client that frames them by
# the rules would (Content-Length, chunked, close-delimited, no body for HEAD,
# 1xx, 204 and 304) and tells whether the connection was closed after them.
# Core Perl only.

use warnings;
use strict;

use IO::Select;
use IO::Socket::INET;
use Time::HiRes qw/time sleep/;

use Exporter qw/import/;
our @EXPORT_OK = qw/exchange parse_responses/;

# Parses the responses in $buf, for requests of the methods @methods (one per
# final response; GET when not given). Returns a list of hash refs:
#   line, version, status, headers ([name, value] pairs as sent), h (lower-
#   case name => value, values of repeated names joined by ", "), body,
#   framing (length, chunked, close or none), trailers (raw), complete, and
#   interim (1 for a 1xx).
# $eof says the peer closed, which completes a close-delimited body.
sub parse_responses {
	my ($buf, $eof, @methods) = @_;
	my @r;
	while (length $buf) {
		my $end = index($buf, "\r\n\r\n");
		last if $end < 0;
		my $head = substr($buf, 0, $end + 4, '');
		my ($line, @lines) = split /\r\n/, $head;
		my ($version, $status) = $line =~ m{^(HTTP/\d\.\d) (\d{3})(?: |$)};
		my $r = { line => $line, version => $version // '', status => $status // 0,
			headers => [], h => {}, body => '', trailers => '', complete => 0 };
		push @r, $r;
		for my $l (@lines) {
			my ($n, $v) = $l =~ /^([^:]*):[ \t]*(.*?)[ \t]*$/ or next;
			push @{$r->{headers}}, [$n, $v];
			my $k = lc $n;
			$r->{h}{$k} = defined $r->{h}{$k} ? "$r->{h}{$k}, $v" : $v;
		}
		last unless $status;
		if ($status < 200) {
			$r->{interim} = 1;
			$r->{framing} = 'none';
			$r->{complete} = 1;
			next;
		}
		my $method = shift(@methods) // 'GET';
		my $te = $r->{h}{'transfer-encoding'};
		my $cl = $r->{h}{'content-length'};
		if ($method eq 'HEAD' || $status == 204 || $status == 304) {
			$r->{framing} = 'none';
			$r->{complete} = 1;
		} elsif (defined $te && $te =~ /chunked$/i) {
			$r->{framing} = 'chunked';
			while ($buf =~ /^([0-9a-fA-F]+)[^\r\n]*\r\n/) {
				my ($size, $at) = (hex $1, $+[0]);
				if ($size == 0) {
					# Trailer fields, then an empty line.
					my $te_end = index($buf, "\r\n\r\n", $at - 2);
					last if $te_end < 0;
					$r->{trailers} = substr($buf, $at, $te_end + 2 - $at);
					substr($buf, 0, $te_end + 4, '');
					$r->{complete} = 1;
					last;
				}
				last if length($buf) < $at + $size + 2;
				$r->{body} .= substr($buf, $at, $size);
				substr($buf, 0, $at + $size + 2, '');
			}
			last unless $r->{complete};
		} elsif (defined $cl && $cl =~ /^\d+$/) {
			$r->{framing} = 'length';
			$r->{body} = substr($buf, 0, $cl, '');
			$r->{complete} = length($r->{body}) == $cl ? 1 : 0;
			last unless $r->{complete};
		} else {
			$r->{framing} = 'close';
			$r->{body} = $buf;
			$buf = '';
			$r->{complete} = $eof ? 1 : 0;
		}
	}
	return @r;
}

# Connects to 127.0.0.1:$o{port}, sends @{$o{send}} (strings are sent as
# they are, { sleep => SECONDS } is a pause that reads what arrives) and reads until the peer closes,
# or until $o{responses} (default 1) final responses are complete, within
# $o{timeout} seconds (default 6: a refused request with unread bytes may
# wait out nginx's lingering_timeout, 5 s, before it is closed). When the
# responses are complete and the connection still open, waits $o{quiet}
# seconds (default 0.5) for it to close. Returns a hash ref:
#   raw (all bytes read), responses (parse_responses, interim ones left
#   out), interim (the 1xx responses), closed (1 when the peer closed),
#   marks (what had been read at the end of each pause), socket (still
#   open when not closed and $o{keep}).
sub exchange {
	my (%o) = @_;
	my $s = IO::Socket::INET->new(PeerAddr => "127.0.0.1:$o{port}", Timeout => 5)
		or die "connect $o{port}: $!\n";
	local $SIG{PIPE} = 'IGNORE';
	my $want = $o{responses} // 1;
	my @methods = @{$o{methods} // []};
	my $sel = IO::Select->new($s);
	my ($buf, $eof) = ('', 0);
	my @marks;
	my $read = sub {
		my ($secs) = @_;
		return 0 unless $sel->can_read($secs);
		my $n = $s->sysread($buf, 65536, length $buf);
		$eof = 1 unless $n;
		return 1;
	};
	for my $part (@{$o{send}}) {
		if (ref $part) {
			my $until = time + $part->{sleep};
			while (!$eof && time < $until) {
				$read->($until - time);
			}
			push @marks, $buf;
			next;
		}
		$s->syswrite($part);
	}
	my $deadline = time + ($o{timeout} // 6);
	while (!$eof && time < $deadline) {
		my @r = grep { !$_->{interim} } parse_responses($buf, 0, @methods);
		last if @r >= $want && !grep { !$_->{complete} } @r;
		$read->($deadline - time) or last;
	}
	if (!$eof) {
		my $until = time + ($o{quiet} // 0.5);
		while (!$eof && time < $until) {
			$read->($until - time) or last;
		}
	}
	my @all = parse_responses($buf, $eof, @methods);
	my $r = {
		raw => $buf,
		responses => [grep { !$_->{interim} } @all],
		interim => [grep { $_->{interim} } @all],
		closed => $eof,
		marks => \@marks,
	};
	if ($o{keep} && !$eof) {
		$r->{socket} = $s;
	} else {
		close $s;
	}
	return $r;
}

1;
