package Test::Sluice::Raw;

# A scripted HTTP/1.1 backend for hostile-input tests: it answers each request
# with raw bytes chosen by the request path, so a test can send what no
# well-behaved server would (conflicting framing, bad status lines, truncated
# bodies, 1xx, 101, huge heads). One process, select()-multiplexed, keep-alive.
#
# The script is a hash ref: path => answer, or a code ref called with the
# request's method, target and head that returns the answer. An answer is a
# string (sent as it is; the connection stays open) or a hash ref:
#   send  => bytes to send
#   close => 1        close the connection after sending
#   hold  => 1        send, then never answer on this connection again
# A path not in the script gets "HTTP/1.1 200 OK" with body "ok PATH".
# Every request received is appended to $opts{log} as one line:
#   CONN METHOD URI BODY_LENGTH
# where CONN numbers the connections accepted, so a test sees what the
# backend received and whether a connection was reused. Every byte read is
# also appended to "$opts{log}.bytes" as it arrives (whole or not), and each
# request it answers, head and body as received, to "$opts{log}.requests" as
# "LENGTH\n" followed by the bytes.

use warnings;
use strict;

use IO::Socket::INET;
use IO::Select;

sub run {
	my ($port, %opts) = @_;
	my $script = $opts{script} // {};
	my $l = IO::Socket::INET->new(LocalAddr => "127.0.0.1:$port", Listen => 128,
		ReuseAddr => 1, Proto => 'tcp') or die "raw backend $port: $!\n";
	if ($opts{ready}) {
		open my $fh, '>', $opts{ready} or die "raw backend: $!\n";
		close $fh;
	}
	my $sel = IO::Select->new($l);
	my (%buf, %id, %held);
	my $accepted = 0;
	local $SIG{TERM} = sub { exit 0 };
	while (1) {
		for my $s ($sel->can_read(1)) {
			if ($s == $l) {
				my $c = $l->accept() or next;
				$sel->add($c);
				$buf{$c} = '';
				$id{$c} = ++$accepted;
				next;
			}
			my $n = sysread($s, my $chunk, 65536);
			unless ($n) {
				$sel->remove($s);
				delete $buf{$s};
				# A later socket may get the same address (its key).
				delete $held{$s};
				close $s;
				next;
			}
			if (my $log = $opts{log}) {
				open my $fh, '>>', "$log.bytes" or die "raw backend log: $!\n";
				binmode $fh;
				print $fh $chunk;
				close $fh;
			}
			next if $held{$s};
			$buf{$s} .= $chunk;
			while ($buf{$s} =~ /\r?\n\r?\n/) {
				my $end = $+[0];
				my $head = substr($buf{$s}, 0, $end);
				my ($len) = $head =~ /^content-length:\s*(\d+)/mi;
				$len //= 0;
				last if length($buf{$s}) < $end + $len;
				my $request = substr($buf{$s}, 0, $end + $len, '');
				my ($method, $uri) = $head =~ /^(\S+)\s+(\S+)/;
				(my $path = $uri) =~ s/\?.*//;
				if (my $log = $opts{log}) {
					open my $fh, '>>', $log or die "raw backend log: $!\n";
					print $fh "$id{$s} $method $uri $len\n";
					close $fh;
					open $fh, '>>', "$log.requests" or die "raw backend log: $!\n";
					binmode $fh;
					print $fh length($request) . "\n" . $request;
					close $fh;
				}
				my $a = ref $script eq 'CODE' ? $script->($method, $uri, $head)
					: $script->{$path}
					// "HTTP/1.1 200 OK\r\nContent-Length: " . (3 + length $path)
					. "\r\n\r\nok $path";
				$a = { send => $a } unless ref $a;
				syswrite($s, $a->{send}) if defined $a->{send};
				if ($a->{close}) {
					$sel->remove($s);
					delete $buf{$s};
					# A later socket may get the same address (its key).
					delete $held{$s};
					close $s;
					last;
				}
				if ($a->{hold}) {
					$held{$s} = 1;
					last;
				}
			}
		}
	}
}

1;
